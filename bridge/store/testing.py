"""In-memory stand-ins for the database side, for fast tests of the daemon without SQLite or threads.

`InMemoryOutbox` is an outbox whose transactions commit in any order, with the visibility rules of a
database that draws a transaction's horizon stamp before its seq (PostgreSQL's transaction id before
`nextval`, SQL Server's ticket before the SEQUENCE): its reader is the real `TailReader` with the real
hole rule, fed a horizon like a real dialect's. `InMemoryLeaseStore` keeps the watermark and the
lease with the same fencing as `OffsetStore`: every write names the epoch it was granted. Both meet the
contracts the databases meet (tests/contracts/reader.py and offsets.py).

The outbox's `on_wait` hook runs whenever the daemon has nothing to do (its reader's `wait`): a test
drives its scenario from there (commit the next transaction, steal the lease, stop the daemon), so the
daemon runs on the test's own thread and every step happens at a known point of the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.core.holes import Horizon, SeqRange
from bridge.core.records import OutboxRow
from bridge.errors import FencedError
from bridge.store.dead_letters import DeadLetter, OpenDeadLetters
from bridge.store.deletable import Deleted
from bridge.store.holders import HorizonHolder
from bridge.store.lease import History, Lease, RewindRequest, StartAt
from bridge.store.offsets import OffsetRow
from bridge.store.reader import TailReader, VisibleRows


@dataclass(slots=True)
class _Open:
    stamp: int
    row: OutboxRow


@dataclass(slots=True)
class _Rewind:
    request: RewindRequest
    state: str
    applied_at: datetime | None = None


class InMemoryOutbox:
    """`domain_events` in memory: `begin` draws a horizon stamp and then a seq, `commit` makes the row
    visible, `rollback` leaves a hole for good."""

    def __init__(self) -> None:
        self.committed: dict[int, OutboxRow] = {}
        self._open: dict[int, _Open] = {}
        self._next_seq = 1
        self._last_stamp = 0
        #: Called each time the daemon waits for new rows, with the number of waits so far.
        self.on_wait: Callable[[int], None] = lambda _waits: None
        self.waits = 0

    def begin(self, aggregate_id: str = "a", aggregate_type: str = "order", payload: str = "{}",
              event_id: str | None = None) -> int:
        """Start a writer's transaction and draw its seq (after its stamp); returns the seq."""
        self._last_stamp += 1
        seq = self._next_seq
        self._next_seq += 1
        row = OutboxRow(seq, event_id or f"e-{seq}", aggregate_type, aggregate_id, "happened", payload, None,
                        datetime.now(UTC), 1)
        self._open[seq] = _Open(self._last_stamp, row)
        return seq

    def commit(self, seq: int) -> None:
        self.committed[seq] = self._open.pop(seq).row

    def rollback(self, seq: int) -> None:
        del self._open[seq]

    def delete(self, *seqs: int) -> None:
        """Committed rows deleted (by hand, or by cleanup): their seqs are holes for good."""
        for seq in seqs:
            del self.committed[seq]

    def write_at(self, seq: int, aggregate_id: str = "a") -> None:
        """A committed row with an explicit seq, behind the seq path's back (into a gap already settled)."""
        self.committed[seq] = OutboxRow(seq, f"late-{seq}", "order", aggregate_id, "happened", "{}", None,
                                        datetime.now(UTC), 1)

    def write(self, aggregate_id: str = "a", aggregate_type: str = "order", payload: str = "{}") -> int:
        """One transaction that commits at once."""
        seq = self.begin(aggregate_id, aggregate_type, payload)
        self.commit(seq)
        return seq

    def horizon(self) -> Horizon:
        """Every transaction at or below `low` has finished; every one that may still commit is at or
        below `high`."""
        low = min(txn.stamp for txn in self._open.values()) - 1 if self._open else self._last_stamp
        return Horizon(low=low, high=self._last_stamp)

    def reader(self) -> InMemoryReader:
        return InMemoryReader(self)


class InMemoryReader(TailReader["InMemoryOutbox"]):
    """The real read loop and hole rule over an `InMemoryOutbox`."""

    def __init__(self, outbox: InMemoryOutbox) -> None:
        super().__init__(self._session, _read_visible)
        self._outbox = outbox
        self.closed = False

    @contextmanager
    def _session(self) -> Iterator[InMemoryOutbox]:
        yield self._outbox

    def head_seq(self) -> int:
        return max(self._outbox.committed, default=0)

    def rows_in(self, holes: Sequence[SeqRange]) -> list[int]:
        return sorted(seq for seq in self._outbox.committed
                      if any(hole.first <= seq <= hole.last for hole in holes))[:100]

    def oldest_after(self, seq: int) -> OutboxRow | None:
        later = [row_seq for row_seq in self._outbox.committed if row_seq > seq]
        return self._outbox.committed[min(later)] if later else None

    def horizon_holder(self) -> HorizonHolder | None:
        return None

    def wait(self, timeout: float) -> None:
        self._outbox.waits += 1
        self._outbox.on_wait(self._outbox.waits)

    def close(self) -> None:
        self.closed = True


def _read_visible(outbox: InMemoryOutbox, after: int, limit: int) -> VisibleRows:
    # The horizon is taken before the rows, as the real dialects do: a transaction that commits in
    # between is then at or below the horizon's view of it, never missed.
    horizon = outbox.horizon()
    rows = tuple(outbox.committed[seq] for seq in sorted(outbox.committed) if seq > after)[:limit]
    return VisibleRows(rows, horizon)


class InMemoryLeaseStore:
    """The watermark and lease of one bridge name, fenced by epoch and owner like `OffsetStore`.

    Time is this process's monotonic clock (a real store uses the database's)."""

    def __init__(self, bridge_name: str = "unit", watermark: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bridge_name = bridge_name
        self.watermark = watermark
        self.epoch = 0
        self.owner: str | None = None
        self.expires_at = 0.0
        self.status: dict[str, Any] = {}
        self.persists = 0
        self._clock = clock
        self._rewinds: list[_Rewind] = []
        #: Dead letters on record, by seq, with when they were recorded; `resolve` closes one.
        self.dead_letters: dict[int, tuple[DeadLetter, datetime]] = {}
        #: What a test says cleanup deleted (`bridge_deletions`), and whether the name is retired.
        self.deleted: Deleted | None = None
        self.retired_at: datetime | None = None
        self.starts: list[StartAt] = []
        self.led_before = False

    def try_acquire(self, owner: str, lease_seconds: float) -> Lease | None:
        now = self._clock()
        if self.owner is not None and self.owner != owner and self.expires_at > now:
            return None
        self.epoch += 1
        self.owner = owner
        self.expires_at = now + lease_seconds
        led_before, self.led_before = self.led_before, True
        return Lease(self.bridge_name, owner, self.epoch, self.watermark, led_before=led_before)

    def steal(self, owner: str = "another-instance") -> None:
        """Another instance takes the lease over, as after this one's lease expired."""
        self.epoch += 1
        self.owner = owner

    def read(self) -> OffsetRow:
        """What `bridge_offsets` would say about this bridge (`OffsetStore.read`)."""
        now = datetime.now(UTC)
        expires = now + timedelta(seconds=self.expires_at - self._clock()) if self.owner is not None else None
        return OffsetRow(self.bridge_name, self.watermark, self.epoch, self.owner, expires, None, None, self.status,
                         self.retired_at)

    def _current(self, lease: Lease) -> bool:
        return lease.epoch == self.epoch and lease.owner == self.owner

    def _fence(self, lease: Lease) -> None:
        if not self._current(lease):
            raise FencedError(f"bridge {self.bridge_name!r}: lease epoch {lease.epoch} of {lease.owner} is no "
                              f"longer current (epoch {self.epoch}, {self.owner})")

    def persist(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], *,
                dead_letters: Sequence[DeadLetter] = ()) -> None:
        self._fence(lease)
        self.watermark = max(self.watermark, watermark)
        self.expires_at = self._clock() + lease_seconds
        self.status = status
        self.persists += 1
        now = datetime.now(UTC)
        self.dead_letters.update((letter.seq, (letter, now)) for letter in dead_letters)

    def persist_rewound(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], *,
                        dead_letters: Sequence[DeadLetter] = ()) -> None:
        # Lowered first, then written as any persist, so a test that watches `persist` sees this write too.
        if self._current(lease):
            self.watermark = min(self.watermark, watermark)
        self.persist(lease, watermark, lease_seconds, status, dead_letters=dead_letters)

    def resolve(self, seq: int) -> None:
        del self.dead_letters[seq]

    def open_dead_letters(self) -> OpenDeadLetters:
        oldest = min((at for _, at in self.dead_letters.values()), default=None)
        return OpenDeadLetters(len(self.dead_letters), oldest)

    def history(self, watermark: int) -> History:
        deleted = self.deleted if self.deleted is not None and self.deleted.through_seq > watermark else None
        return History(watermark, self.retired_at, "retired in a test" if self.retired_at else None, deleted,
                       None, None)

    def start_at(self, lease: Lease, start: StartAt, lease_seconds: float) -> None:
        self._fence(lease)
        self.watermark = start.watermark
        self.retired_at = None
        self.starts.append(start)

    def release(self, lease: Lease) -> None:
        if lease.epoch == self.epoch:
            self.owner = None
            self.expires_at = 0.0

    def request_rewind(self, from_seq: int, requested_by: str = "test", state: str = "pending") -> RewindRequest:
        """What `outbox-bridge replay --mode rewind` records: a pending request for the leader (or, with
        `state`, one an earlier leader already answered)."""
        request = RewindRequest(len(self._rewinds) + 1, from_seq, requested_by, None)
        self._rewinds.append(_Rewind(request, state))
        return request

    def rewind_status(self, request: RewindRequest) -> str:
        return self._rewind(request.id).state

    def rewind_applied_at(self, request: RewindRequest) -> datetime | None:
        return self._rewind(request.id).applied_at

    def _rewind(self, request_id: int) -> _Rewind:
        return next(known for known in self._rewinds if known.request.id == request_id)

    def pending_rewind(self) -> RewindRequest | None:
        return next((known.request for known in self._rewinds if known.state == "pending"), None)

    def _mark(self, request: RewindRequest, state: str) -> bool:
        for known in self._rewinds:
            if known.request.id == request.id and known.state == "pending":
                known.state = state
                known.applied_at = datetime.now(UTC) if state == "applied" else None
                return True
        return False

    def apply_rewind(self, lease: Lease, request: RewindRequest, lease_seconds: float) -> bool:
        self._fence(lease)
        if not self._mark(request, "applied"):
            return False
        self.watermark = request.from_seq - 1
        self.expires_at = self._clock() + lease_seconds
        return True

    def refuse_rewind(self, request: RewindRequest, why: str) -> None:
        self._mark(request, "refused")
