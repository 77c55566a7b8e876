"""Reading the outbox on PostgreSQL below the commit-visibility horizon, and naming what holds it back.

Each read takes the visible rows after the cursor and `pg_current_snapshot()` in ONE statement, so
the horizon describes exactly the snapshot the rows came from. Run each read in its own short
transaction (READ COMMITTED, or autocommit): under REPEATABLE READ every read of a transaction would
see the same snapshot and the horizon would never move.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import BigInteger, ColumnElement, Select, Text, bindparam, cast, func, select, text, true
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from bridge.schema import as_utc, domain_events
from bridge.store.failures import store_error
from bridge.store.holes import HoleTracker, Horizon, SeqRange
from bridge.store.rows import ROW_COLUMNS, OutboxRow


@dataclass(frozen=True, slots=True)
class VisibleRows:
    """Rows visible after a cursor, in seq order, with the horizon of the snapshot that saw them."""

    rows: tuple[OutboxRow, ...]
    horizon: Horizon


@dataclass(frozen=True, slots=True)
class Poll:
    """One step of the tail: rows to publish now (contiguous after the old cursor, in seq order), the
    permanent holes passed over, and the hole still waited on, if any."""

    rows: tuple[OutboxRow, ...]
    settled: tuple[SeqRange, ...]
    waiting_on: SeqRange | None
    horizon: Horizon
    cursor: int


@dataclass(frozen=True, slots=True)
class HorizonHolder:
    """A running transaction that holds the horizon back: the operator's answer to "why is it stuck".
    `pid` is None for a prepared (two-phase) transaction, whose `state` says how to end it."""

    pid: int | None
    xid: str | None
    started_at: datetime | None
    state: str | None
    application_name: str | None
    client: str | None
    query: str | None


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
        # The outer join returns the snapshot even when no row is visible.
        .select_from(snapshot.outerjoin(events, true()))
        .order_by(events.c.seq)
    )


#: Built once; SQLAlchemy caches its compiled form.
_VISIBLE: Final = _visible_query()


def read_visible(conn: Connection, after: int, limit: int) -> VisibleRows:
    """Up to `limit` visible rows with seq above `after`, and the horizon of the same snapshot."""
    try:
        cursor_result = conn.execute(_VISIBLE, {"after": after, "limit": limit})
        # The driver's own tuples: SQLAlchemy's row objects and result processors cost more than the rest
        # of the read, per event. The bridge's sessions run in UTC, so timestamps arrive as UTC already.
        result = cursor_result.cursor.fetchall()
        cursor_result.close()
    except DBAPIError as exc:
        raise store_error(exc, f"reading domain_events after seq {after}") from exc
    low, high = int(result[0][0]), int(result[0][1])
    # Positional: after the two horizon columns come ROW_COLUMNS, in OutboxRow's field order.
    rows = tuple(OutboxRow(*row[2:]) for row in result if row[2] is not None)
    if rows and rows[0].occurred_at.tzinfo is not UTC:
        # A session not set to UTC (a connection from elsewhere than `make_engine`): normalise.
        rows = tuple(row._replace(occurred_at=as_utc(row.occurred_at)) for row in rows)
    if _has_gap(after, rows):
        # pg_snapshot_xmax is latestCompletedXid + 1, not the next xid to be assigned: a writer that took
        # its xid (and then a seq below a visible row) before this snapshot can still hold an xid at or
        # above it, and would be settled as a hole while it runs. A fresh xid taken after the snapshot is
        # above every xid assigned before it, so it is a safe mark. It costs one xid per read that sees
        # a gap; this read's transaction ends (rolls back) right after, so it holds nothing back.
        try:
            high = max(high, int(conn.execute(select(_xid8_as_bigint(func.pg_current_xact_id()))).scalar_one()))
        except DBAPIError as exc:
            raise store_error(exc, "taking a transaction id to mark a hole") from exc
    return VisibleRows(rows, Horizon(low=low, high=high))


def _has_gap(after: int, rows: tuple[OutboxRow, ...]) -> bool:
    """Whether the visible seqs after `after` skip one (rows come in seq order)."""
    return bool(rows) and rows[-1].seq - after != len(rows)


def poll(conn: Connection, tracker: HoleTracker, limit: int) -> Poll:
    """Read after the tracker's cursor and advance it: what to publish now, in seq order."""
    return advance(tracker, read_visible(conn, tracker.cursor, limit))


def advance(tracker: HoleTracker, visible: VisibleRows) -> Poll:
    """Feed one read to the hole tracker and keep the rows it lets through (any dialect's read)."""
    step = tracker.advance((row.seq for row in visible.rows), visible.horizon)
    by_seq = {row.seq: row for row in visible.rows}
    return Poll(
        rows=tuple(by_seq[seq] for seq in step.deliver),
        settled=step.settled,
        waiting_on=step.waiting_on,
        horizon=visible.horizon,
        cursor=step.cursor,
    )


# Prepared (two-phase) transactions hold the horizon too but have no session in pg_stat_activity: a
# forgotten one stalls the bridge for good, so it is listed with the command that ends it.
_HOLDERS = text(
    """
    SELECT pid, backend_xid::text AS xid, xact_start AS started_at, state, application_name,
           client_addr::text AS client, left(query, 300) AS query, age(backend_xid) AS xid_age
    FROM pg_stat_activity
    WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
    UNION ALL
    SELECT NULL, transaction::text, prepared,
           'prepared: end it with COMMIT PREPARED or ROLLBACK PREPARED ' || quote_literal(gid),
           NULL, NULL, NULL, age(transaction)
    FROM pg_prepared_xacts
    ORDER BY xid_age DESC
    LIMIT :limit
    """
)


def horizon_holders(conn: Connection, limit: int = 5) -> list[HorizonHolder]:
    """The oldest running or prepared transactions that have a transaction id, oldest first: the ones a
    pending hole waits for. Query texts of other users show only with `pg_read_all_stats`."""
    try:
        result = conn.execute(_HOLDERS, {"limit": limit}).mappings().all()
    except DBAPIError as exc:
        raise store_error(exc, "listing the transactions that hold the horizon (pg_stat_activity)") from exc
    return [
        HorizonHolder(
            pid=None if row["pid"] is None else int(row["pid"]),
            xid=row["xid"],
            started_at=row["started_at"],
            state=row["state"],
            application_name=row["application_name"],
            client=row["client"],
            query=row["query"],
        )
        for row in result
    ]
