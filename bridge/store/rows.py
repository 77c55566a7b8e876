"""Outbox rows as the bridge reads them, and the plain seq-ordered read that SQLite can rely on."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Select, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from bridge.schema import as_utc, domain_events
from bridge.store.failures import store_error


class OutboxRow(NamedTuple):
    """One `domain_events` row: `payload` is the JSON text exactly as written, `headers` the raw JSON
    text of the row's own headers (None when absent); parsing them is the publisher's call.

    A named tuple rather than a frozen dataclass: the bridge makes one per event, and a tuple is made
    several times faster."""

    seq: int
    event_id: str
    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: str
    headers: str | None
    occurred_at: datetime
    schema_version: int

    @classmethod
    def from_mapping(cls, row: Mapping[Any, Any]) -> OutboxRow:
        return cls(
            seq=int(row["seq"]),
            event_id=row["event_id"],
            aggregate_type=row["aggregate_type"],
            aggregate_id=row["aggregate_id"],
            event_type=row["event_type"],
            payload=row["payload"],
            headers=row["headers"],
            occurred_at=row["occurred_at"],
            schema_version=int(row["schema_version"]),
        )


#: The portable columns, in `OutboxRow` order.
ROW_COLUMNS = tuple(domain_events.c[name] for name in OutboxRow._fields)


def rows_after(after: int, limit: int) -> Select[Any]:
    """The query for up to `limit` rows with seq above `after`, in seq order."""
    seq = domain_events.c.seq
    return select(*ROW_COLUMNS).where(seq > after).order_by(seq).limit(limit)


def select_after_sqlite(conn: Connection, after: int, limit: int) -> list[OutboxRow]:
    """`select_after` for SQLite, on the driver's own tuples: the bridge's hot read, without SQLAlchemy's
    per-row objects. `occurred_at` is ISO 8601 text there, parsed as UtcTimestamp does (`as_utc`)."""
    try:
        result = conn.execute(rows_after(after, limit))
        raw = result.cursor.fetchall()
        result.close()
    except DBAPIError as exc:
        raise store_error(exc, f"reading domain_events after seq {after}") from exc
    return [OutboxRow(*row[:7], as_utc(row[7]), row[8]) for row in raw]  # type: ignore[call-arg]


def select_after(conn: Connection, after: int, limit: int) -> list[OutboxRow]:
    """Rows with seq above `after`, in seq order. Safe to tail only where commit order is seq order
    (SQLite, one writer at a time); elsewhere use the dialect's horizon-aware read."""
    try:
        result = conn.execute(rows_after(after, limit))
    except DBAPIError as exc:
        raise store_error(exc, f"reading domain_events after seq {after}") from exc
    # Positional: the columns are selected in OutboxRow's field order (mapping each row costs more).
    return [OutboxRow(*row) for row in result]
