"""The outbox reader: one interface, one read loop that every dialect shares.

A dialect supplies two things: a session (a connection for one read: checked out and released, or kept
between reads on PostgreSQL) and a `read_visible(session, after, limit)` that returns the rows visible
after a seq together with the horizon of the same read. The loop is two steps, `fetch` and `settle`: it
feeds the hole rule only after the session was released cleanly, so a read that fails anywhere, even at
its closing ROLLBACK, changes nothing, and the next read asks again from the same place. The reader keeps
no cursor; the caller passes `after` (the ack tracker's position, the bridge's one cursor).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from bridge.core.holes import HoleRule, Horizon, SeqRange
from bridge.core.records import OutboxRow
from bridge.store.failures import store_error
from bridge.store.holders import HorizonHolder
from bridge.store.table import OutboxTable


@dataclass(frozen=True, slots=True)
class VisibleRows:
    """Rows visible after a seq, in seq order, with the horizon of the read that saw them."""

    rows: tuple[OutboxRow, ...]
    horizon: Horizon


@dataclass(frozen=True, slots=True)
class Batch:
    """Rows to publish now in seq order, and the holes settled before them (each one precedes a row)."""

    rows: tuple[OutboxRow, ...]
    settled: tuple[SeqRange, ...]
    waiting_on: SeqRange | None

    @property
    def holes(self) -> int:
        return sum(hole.count for hole in self.settled)

    def in_order(self) -> Iterator[OutboxRow | SeqRange]:
        """Rows and settled holes merged in seq order: the order the ack tracker must account for them."""
        settled = self.settled
        next_hole = 0
        for row in self.rows:
            while next_hole < len(settled) and settled[next_hole].last < row.seq:
                yield settled[next_hole]
                next_hole += 1
            yield row


class OutboxReader(Protocol):
    """What the daemon needs from the outbox database."""

    def poll(self, after: int, limit: int) -> Batch:
        """Rows safe to publish after seq `after`, and the holes settled on the way; no side effect
        unless the whole read succeeded."""
        ...

    def forget_holes(self) -> None:
        """Drop the holes being waited on (the caller restarts lower down: a rewind or a rebuild)."""
        ...

    def head_seq(self) -> int: ...

    def rows_in(self, holes: Sequence[SeqRange]) -> list[int]:
        """The seqs that exist now inside `holes` (holes settled earlier), in seq order."""
        ...

    def oldest_after(self, seq: int) -> OutboxRow | None: ...

    def horizon_holder(self) -> HorizonHolder | None:
        """The transaction the first pending hole waits for; None when nothing blocks."""
        ...

    def wait(self, timeout: float) -> None: ...

    def close(self) -> None: ...


Session = TypeVar("Session")


def fetch(
    session: Callable[[], AbstractContextManager[Session]],
    read_visible: Callable[[Session, int, int], VisibleRows],
    after: int,
    limit: int,
) -> VisibleRows:
    """One read, with no effect on the hole rule: a read that is never settled changes nothing."""
    try:
        with session() as opened:
            return read_visible(opened, after, limit)
    except DBAPIError as exc:
        raise store_error(exc, f"reading domain_events after seq {after}") from exc


def settle(rule: HoleRule, after: int, visible: VisibleRows) -> Batch:
    """A read that fully succeeded (rows fetched, connection released) given to the hole rule: only now may
    it count. The rows to publish now, and the holes settled before them."""
    step = rule.advance(after, (row.seq for row in visible.rows), visible.horizon)
    rows = visible.rows
    if len(step.deliver) != len(rows):
        by_seq = {row.seq: row for row in rows}
        rows = tuple(by_seq[seq] for seq in step.deliver)
    return Batch(rows, step.settled, step.waiting_on)


class TailReader(Generic[Session]):
    """The read loop of `OutboxReader` on any dialect, given its session and its visible-rows read.

    SQLite, SQL Server and the in-memory outbox subclass it: each of their reads is exactly this loop with
    their session and `read_visible`, and a subclass only adds the lookups beside it, never a step of the
    loop. PostgreSQL's reader does work around each read (a kept connection, a read sent ahead, notifications
    to take), so it assembles `fetch` and `settle` itself instead of subclassing this."""

    def __init__(
        self,
        session: Callable[[], AbstractContextManager[Session]],
        read_visible: Callable[[Session, int, int], VisibleRows],
    ) -> None:
        self._session = session
        self._read_visible = read_visible
        self._rule = HoleRule()
        #: The first hole the last read waited on; None when nothing blocks.
        self.waiting_on: SeqRange | None = None

    def poll(self, after: int, limit: int) -> Batch:
        batch = settle(self._rule, after, fetch(self._session, self._read_visible, after, limit))
        self.waiting_on = batch.waiting_on
        return batch

    def forget_holes(self) -> None:
        self._rule.forget()
        self.waiting_on = None

    @property
    def pending(self) -> tuple[SeqRange, ...]:
        """Holes seen and still waited on."""
        return self._rule.pending


class SqlReader(TailReader[Session]):
    """The read loop on a SQL database that sends no notifications: the outbox's lookups, and waiting by
    sleeping (the daemon adapts the interval)."""

    def __init__(
        self,
        engine: Engine,
        session: Callable[[], AbstractContextManager[Session]],
        read_visible: Callable[[Session, int, int], VisibleRows],
    ) -> None:
        super().__init__(session, read_visible)
        self.engine = engine
        self.table = OutboxTable(engine)
        self._wakeup = threading.Event()

    def head_seq(self) -> int:
        return self.table.head_seq()

    def rows_in(self, holes: Sequence[SeqRange]) -> list[int]:
        return self.table.rows_in(holes)

    def oldest_after(self, seq: int) -> OutboxRow | None:
        return self.table.oldest_after(seq)

    def horizon_holder(self) -> HorizonHolder | None:
        return None

    def wait(self, timeout: float) -> None:
        self._wakeup.wait(timeout)
        self._wakeup.clear()

    def close(self) -> None:
        self.engine.dispose()
