"""Reading the outbox on SQLite: one writer at a time, so commit order is seq order.

A row becomes visible only when its writer commits, and the next writer starts after that, so a gap
below a visible row can only be a rolled-back or deleted row: every hole is settled at once. (The
seq column is AUTOINCREMENT, so a rolled-back or deleted seq is never handed out again.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Final

from sqlalchemy.engine import Connection, Engine

from bridge.core.holes import Horizon
from bridge.core.records import OutboxRow
from bridge.store.reader import SqlReader, VisibleRows
from bridge.store.rows import select_after_sqlite

#: Every gap below a visible row is final, so every hole settles under this constant horizon.
ALWAYS_SETTLED: Final = Horizon(low=0, high=0)


class SqliteSession:
    """One read's connection: the plain seq-ordered SELECT."""

    __slots__ = ("conn",)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def rows_after(self, after: int, limit: int) -> tuple[OutboxRow, ...]:
        return tuple(select_after_sqlite(self.conn, after, limit))


def read_visible(session: SqliteSession, after: int, limit: int) -> VisibleRows:
    """Up to `limit` committed rows above `after`; any gap among them is final."""
    return VisibleRows(session.rows_after(after, limit), ALWAYS_SETTLED)


@contextmanager
def _session(engine: Engine) -> Iterator[SqliteSession]:
    with engine.connect() as conn:
        yield SqliteSession(conn)


class SqliteReader(SqlReader[SqliteSession]):
    """SQLite tail: plain seq order, adaptive polling."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, partial(_session, engine), read_visible)

    def oldest_after(self, seq: int) -> OutboxRow | None:
        # The same conversion as the tail read: a row it cannot convert must not fail the status.
        rows = self.table.run("reading the oldest unpublished event", lambda c: select_after_sqlite(c, seq, 1))
        return rows[0] if rows else None
