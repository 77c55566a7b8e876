"""When a term checkpoints, and on which thread.

Every persist interval a term looks for rows in holes it settled, persists the watermark and renews its lease in
one fenced write, reads what it reports (the head, the oldest unpublished event, the open dead letters) and looks
for an operator's rewind request: six or seven statements, about 7 ms on a local PostgreSQL, during which a loop
that did them itself read nothing and served no delivery report; at 5,000 events/s, a burst of events a
second waited for them. On a database whose connections may be used from any thread, those statements run on
one worker thread (`look`) while the loop goes on reading and sending. The worker changes nothing of the term:
it answers whether a rewind is wanted, and the loop carries it out (the term's checkpoint, run in the loop,
`checkpoint`) the next time it comes here. Everything else stays as when the loop did it all:

- A term whose lease has run out (a pause, a slow renewal) waits here for the checkpoint in flight and then
  checkpoints in the loop, before it reads anything more: `Leadership.may_send` guards every record meanwhile.
- A fenced write (another instance leads) or a refused login raises here, in the loop, as it did.
- Only one checkpoint is in flight; the term waits for it (`close`) before it gives up or loses the lease.

A SQLite database in memory, whose connection lives with its thread, checkpoints in the loop (`worker=False`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as finished

from bridge.config import LoopSection
from bridge.core.holes import SeqRange
from bridge.errors import FencedError, TransientStoreError
from bridge.store.reader import OutboxReader

log = logging.getLogger("bridge.daemon")

#: Looks at the database on the worker, persisting on the way: True when the term must checkpoint in the loop
#: (rows turned up in settled holes, or an operator asked for a rewind).
Look = Callable[[], Callable[[], bool]]


def look(reader: OutboxReader, holes: Sequence[SeqRange], persist: Callable[[], None],
         pending_rewind: Callable[[], object | None]) -> bool:
    """The checkpoint's statements on the worker: True when the loop must checkpoint itself (rows turned up in
    `holes`, or an operator asked for a rewind); else the watermark was persisted and the lease renewed."""
    if reader.rows_in(holes):
        return True
    persist()
    return pending_rewind() is not None


class Checkpoints:
    """A term's checkpoints: `turn(now)` before each read starts, collects or runs one when due."""

    def __init__(self, settings: LoopSection, started: float, expired: Callable[[], bool],
                 checkpoint: Callable[[], None], on_error: Callable[[str, Exception], None], *, look: Look,
                 worker: bool) -> None:
        """`checkpoint` runs a whole one in the loop; `look()` (in the loop) gives what the worker runs;
        `on_error` counts a database error either met."""
        self._interval_s = settings.persist_interval_s
        self._lease_timeout_s = settings.lease_timeout_s
        self._last = started
        self._expired = expired
        self._checkpoint = checkpoint
        self._look = look
        self._on_error = on_error
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bridge-checkpoint") if worker else None
        self._pending: Future[bool] | None = None

    def turn(self, now: float) -> None:
        """Collect the checkpoint in flight once it is done (at once when the lease ran out), then start the
        next one when it is due, in the loop when the lease ran out or there is no worker."""
        pending = self._pending
        if pending is not None:
            if not pending.done() and not self._expired():
                return
            self._pending = None
            self._collect(pending)
        expired = self._expired()
        if not expired and now - self._last < self._interval_s:
            return
        self._last = now
        if self._executor is None or expired:
            self._checkpoint()
        else:
            self._pending = self._executor.submit(self._look())

    def finish(self) -> None:
        """Wait until the checkpoint in flight is done; the next `turn` takes its outcome."""
        if self._pending is not None:
            finished([self._pending])

    def close(self) -> None:
        """Wait for the checkpoint in flight and stop the worker; its outcome no longer matters (the term is
        ending: a rewind wanted is found again by the next leader)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            finished([pending])
            if (error := pending.exception()) is not None:
                log.debug("the last checkpoint of a term that is ending failed", extra={"error": str(error)})
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _collect(self, pending: Future[bool]) -> None:
        try:
            wanted = pending.result()  # the worker's FencedError or refused login raises here
        except TransientStoreError as exc:
            self.failed(exc)
            return
        if wanted:
            self._checkpoint()

    def failed(self, exc: TransientStoreError) -> None:
        """A checkpoint met a database error: count it, and stop publishing once the lease has run out."""
        self._on_error("database", exc)
        if self._expired():
            # Another instance may have taken over meanwhile.
            raise FencedError(f"could not renew the lease for {self._lease_timeout_s}s") from exc
