"""`outbox-bridge run`: the daemon that publishes the outbox, one room per concept.

- `loop`: `BridgeDaemon`, start-up, the lease, the retries and the lifecycle, one term per lease;
- `term`: `Term`, one leadership term (read, send, checkpoint as numbered steps, rewind, rebuild), which
  returns how it ended (`Ending`); `term_parts`: what every term of an instance works with;
- `in_flight`: the records a term has sent, and what their delivery reports do;
- `checkpoints`: when a term checkpoints, its statements on a worker thread beside the loop;
- `persisting`: what each persist writes (watermark, status, dead letters) under the lease;
- `assemble`: `build_daemon`, the daemon wired from the configuration, each part given its section;
- `leadership`: the lease (stand by, take, renew with each persist, the monotonic send deadline);
- `poison`: from a row to its record under the poison policy, topics checked once;
- `rewinds`: operator rewind requests and late rows, as decisions a term carries out;
- `history`: whether a new leader may start at its watermark, or where the operator said;
- `retention`: deleting published rows past `BRIDGE_RETENTION` while leading;
- `tally`: what an instance has counted and the last error it met, across its terms;
- `status`: what each persist reports;
- `memory`: the garbage collector's pace while the daemon runs.

The collaborators decide and never call back into the loop; the pure rules they rely on are in
`bridge.core`. The exit codes are `bridge.exits`.
"""

from bridge.daemon.assemble import build_daemon
from bridge.daemon.loop import BridgeDaemon
from bridge.exits import EXIT_OK, EXIT_POISON, EXIT_UNSAFE, EXIT_USAGE

#: A damaged seq path and an outbox not migrated exit as configuration errors do (`bridge.exits`).
EXIT_DAMAGED = EXIT_NOT_MIGRATED = EXIT_USAGE

__all__ = ["EXIT_DAMAGED", "EXIT_NOT_MIGRATED", "EXIT_OK", "EXIT_POISON", "EXIT_UNSAFE", "BridgeDaemon", "build_daemon"]
