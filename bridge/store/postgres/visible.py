"""The visible-rows read on PostgreSQL: the rows after the cursor and `pg_current_snapshot()` in ONE statement,
so the horizon describes exactly the snapshot the rows came from.

The reads run in autocommit (see `connection.KeptConnection`): each statement is its own transaction with its
own snapshot, so the horizon moves on every read (under REPEATABLE READ every read of a transaction would see
the same snapshot and it never would).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import UTC
from typing import Any, Final

import psycopg
from sqlalchemy import BigInteger, ColumnElement, Select, Text, bindparam, cast, func, select, true
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from bridge.core.holes import Horizon
from bridge.core.records import OutboxRow
from bridge.schema import as_utc, domain_events
from bridge.store.reader import VisibleRows
from bridge.store.rows import ROW_COLUMNS


def _xid8_as_bigint(expression: ColumnElement[Any]) -> ColumnElement[int]:
    # xid8 has no cast to bigint; its text form is the decimal 64-bit id.
    return cast(cast(expression, Text), BigInteger)


def _visible_query() -> Select[Any]:
    snapshot = select(func.pg_current_snapshot().label("s")).subquery("snapshot")
    seq = domain_events.c.seq
    events = (
        select(*ROW_COLUMNS).where(seq > bindparam("after")).order_by(seq).limit(bindparam("limit"))
    ).lateral("events")
    return (
        select(
            _xid8_as_bigint(func.pg_snapshot_xmin(snapshot.c.s)).label("horizon_low"),
            _xid8_as_bigint(func.pg_snapshot_xmax(snapshot.c.s)).label("horizon_high"),
            *(events.c[column.name] for column in ROW_COLUMNS),
        )
        # The outer join returns the snapshot even when no row is visible. No outer ORDER BY: the lateral
        # read is already in seq order, and sorting its rows again (wide, with their payloads) took half the
        # statement's time on the server; `snapshot_rows` checks the order and sorts only if it is not.
        .select_from(snapshot.outerjoin(events, true()))
    )


#: Built once; SQLAlchemy caches its compiled form.
_VISIBLE: Final = _visible_query()

#: `_VISIBLE` as SQLAlchemy compiles it for psycopg, for the reads sent ahead outside SQLAlchemy (`ahead`).
VISIBLE_SQL: Final = str(_VISIBLE.compile(dialect=psycopg_dialect()))  # type: ignore[no-untyped-call]


class PostgresSession:
    """One read's connection, as the two statements the horizon read needs; `taken` is the answer of a read
    ahead for this read, when there was one, and `cursor` psycopg's own cursor on `conn`, kept between reads
    by the caller (one of its own per read when None)."""

    __slots__ = ("conn", "cursor", "taken")

    def __init__(self, conn: Connection, taken: list[tuple[Any, ...]] | None = None, cursor: Any = None) -> None:
        self.conn = conn
        self.taken = taken
        self.cursor = cursor

    def snapshot_rows(self, after: int, limit: int) -> tuple[int, int, tuple[OutboxRow, ...]]:
        """`pg_snapshot_xmin`, `pg_snapshot_xmax` and up to `limit` rows above `after`, from one snapshot."""
        result: Sequence[Any] | None
        result, self.taken = self.taken, None
        if result is None:
            result = visible_rows(self.conn, self.cursor, {"after": after, "limit": limit})
        # Positional: after the two horizon columns come ROW_COLUMNS, in OutboxRow's field order.
        rows = tuple(OutboxRow(*row[2:]) for row in result if row[2] is not None)
        seqs = [row.seq for row in rows]
        if not all(map(operator.lt, seqs, seqs[1:])):
            rows = tuple(sorted(rows, key=operator.attrgetter("seq")))
        if rows and rows[0].occurred_at.tzinfo is not UTC:
            # A session not set to UTC (a connection from elsewhere than `make_engine`): normalise.
            rows = tuple(row._replace(occurred_at=as_utc(row.occurred_at)) for row in rows)
        return int(result[0][0]), int(result[0][1]), rows

    def current_xid(self) -> int:
        """A fresh transaction id, taken after the last `snapshot_rows`."""
        return int(self.conn.execute(_CURRENT_XID).scalar_one())


_CURRENT_XID: Final = select(_xid8_as_bigint(func.pg_current_xact_id()))


def visible_rows(conn: Connection, cursor: Any, params: dict[str, int]) -> list[tuple[Any, ...]]:
    """`VISIBLE_SQL`'s rows, run on psycopg's own `cursor` on `conn` (a new one when None), as the read ahead
    runs it. A caught-up bridge reads hundreds of times a second, and SQLAlchemy's execution context and result
    around the statement cost as much CPU as the statement itself (an empty read: 137 against 70 us of CPU
    here). Errors are reported as SQLAlchemy reports them: a `DBAPIError`, with `connection_invalidated` set,
    and the connection invalidated, when the connection was lost."""
    driver = conn.connection.driver_connection
    if cursor is None:
        cursor = driver.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(VISIBLE_SQL, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    except psycopg.Error as exc:
        lost = bool(conn.dialect.is_disconnect(exc, driver, cursor))  # type: ignore[arg-type]
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(VISIBLE_SQL, params, exc, psycopg.Error, connection_invalidated=lost,
                                  dialect=conn.dialect) from exc
    return rows


def read_visible(session: PostgresSession, after: int, limit: int) -> VisibleRows:
    """Up to `limit` visible rows with seq above `after`, and the horizon of the same snapshot."""
    low, high, rows = session.snapshot_rows(after, limit)
    if _has_gap(after, rows):
        # pg_snapshot_xmax is latestCompletedXid + 1, not the next xid to be assigned: a writer that took
        # its xid (and then a seq below a visible row) before this snapshot can still hold an xid at or
        # above it, and would be settled as a hole while it runs. A fresh xid taken after the snapshot is
        # above every xid assigned before it, so it is a safe mark. It costs one xid per read that sees
        # a gap. The statement is its own transaction (autocommit): it wrote nothing, so its commit is
        # not flushed to disk, and it holds nothing back.
        high = max(high, session.current_xid())
    return VisibleRows(rows, Horizon(low=low, high=high))


def _has_gap(after: int, rows: tuple[OutboxRow, ...]) -> bool:
    """Whether the visible seqs after `after` skip one (rows come in seq order)."""
    return bool(rows) and rows[-1].seq - after != len(rows)
