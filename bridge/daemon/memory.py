"""The garbage collector's pace while the daemon runs.

Each event makes a handful of container objects (its row, its record and headers, its in-flight
entry, its delivery callback), and most of them live until Kafka acknowledges the event, tens of
milliseconds later. At CPython's default gen-0 threshold of 700 allocations a young collection runs
every hundred or so events, and each one walks the in-flight window it cannot free: measured on B1
(300,000 events, PostgreSQL to one broker), a quarter of the daemon's time. Nothing on the per-event
path makes a reference cycle (the collector's only work), so collecting less often frees the same
memory, a little later.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

#: (gen 0, gen 1, gen 2): a young collection every 10,000 net allocations instead of 700, and the
#: older generations in proportion. B1, 300,000 events, two runs each: 26,500 to 28,200 events/s at
#: CPython's (700, 10, 10), 36,400 to 37,000 at this; with the collector off, 35,200 to 36,600.
DAEMON_THRESHOLDS: Final = (10_000, 20, 100)


@contextmanager
def daemon_gc() -> Iterator[None]:
    """Run the block at the daemon's collector pace, with what start-up made frozen (never walked
    again); the process's own pace and the unfrozen heap come back after it."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*DAEMON_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
