"""Outbox rows as the bridge reads them, and the plain seq-ordered read that SQLite can rely on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from bridge.schema import domain_events
from bridge.store.failures import store_error


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One `domain_events` row: `payload` is the JSON text exactly as written, `headers` the raw JSON
    text of the row's own headers (None when absent); parsing them is the publisher's call."""

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
ROW_COLUMNS = tuple(domain_events.c[field.name] for field in fields(OutboxRow))


def rows_after(after: int, limit: int) -> Select[Any]:
    """The query for up to `limit` rows with seq above `after`, in seq order."""
    seq = domain_events.c.seq
    return select(*ROW_COLUMNS).where(seq > after).order_by(seq).limit(limit)


def select_after(conn: Connection, after: int, limit: int) -> list[OutboxRow]:
    """Rows with seq above `after`, in seq order. Safe to tail only where commit order is seq order
    (SQLite, one writer at a time); elsewhere use the dialect's horizon-aware read."""
    try:
        result = conn.execute(rows_after(after, limit))
    except DBAPIError as exc:
        raise store_error(exc, f"reading domain_events after seq {after}") from exc
    # Positional: the columns are selected in OutboxRow's field order (mapping each row costs more).
    return [OutboxRow(*row) for row in result]
