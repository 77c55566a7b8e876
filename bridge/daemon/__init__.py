"""`outbox-bridge run`: the daemon that publishes the outbox, one room per concept.

- `loop`: `BridgeDaemon`, the one loop that reads, sends, serves delivery reports and checkpoints;
- `assemble`: `build_daemon`, the daemon wired from the configuration, each part given its section;
- `leadership`: the lease (stand by, take, renew with each persist, the monotonic send deadline);
- `poison`: from a row to its record under the poison policy, topics checked once;
- `rewinds`: operator rewind requests and late rows, as decisions the loop carries out;
- `retention`: deleting published rows past `BRIDGE_RETENTION` while leading;
- `status`: what each persist reports;
- `memory`: the garbage collector's pace while the daemon runs.

The collaborators decide and never call back into the loop; the pure rules they rely on are in
`bridge.core`.
"""

from bridge.daemon.assemble import build_daemon
from bridge.daemon.loop import BridgeDaemon
from bridge.exits import EXIT_OK, EXIT_POISON, EXIT_UNSAFE, EXIT_USAGE

#: A damaged seq path and an outbox not migrated exit as configuration errors do (`bridge.exits`).
EXIT_DAMAGED = EXIT_NOT_MIGRATED = EXIT_USAGE

__all__ = ["EXIT_DAMAGED", "EXIT_NOT_MIGRATED", "EXIT_OK", "EXIT_POISON", "EXIT_UNSAFE", "BridgeDaemon", "build_daemon"]
