"""Append events to the outbox inside the caller's own transaction: the Python side of the outbox contract.

    with engine.begin() as conn:
        conn.execute(update(orders)...)
        append(conn, [OutboxEvent(aggregate_type="order", aggregate_id="42",
                                  event_type="OrderPlaced", payload={"total": 10})])

Nothing here commits: the events become visible with the business change, or not at all. Appended inside an
active OpenTelemetry span, each event carries that span's W3C trace context (`traceparent`, `tracestate`) as
headers, unless it carries its own, so the trace continues through the bridge to its consumers.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

from sqlalchemy import bindparam, func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from bridge.core.json_text import NotJsonError, parse_json
from bridge.errors import DuplicateEventError, InvalidEventError
from bridge.schema import EVENT_ID_UNIQUE, UtcTimestamp, domain_events, utc_now
from bridge.store.failures import store_error
from bridge.tracing.context import TRACEPARENT, TRACESTATE, active_trace_headers

#: Kafka header names the bridge sets itself from the row's columns; a row header may not reuse them.
RESERVED_HEADERS: Final = frozenset({"event_id", "event_type", "aggregate_type", "seq", "occurred_at"})
_LIMITS: Final = {"event_id": 100, "aggregate_type": 255, "aggregate_id": 255, "event_type": 255}

JsonPayload = str | Mapping[str, Any] | list[Any]


def _payload_text(payload: JsonPayload, event_id: str) -> str:
    """JSON text kept byte for byte, or a dict/list serialized compactly."""
    if isinstance(payload, str):
        text = payload
    elif isinstance(payload, Mapping | list):
        try:
            text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidEventError(f"event {event_id}: payload cannot be serialized as JSON ({exc})") from exc
    else:
        raise InvalidEventError(
            f"event {event_id}: payload must be JSON text, a dict or a list, not {type(payload).__name__}"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEventError(f"event {event_id}: payload is not valid Unicode ({exc.reason})") from exc
    try:
        # The bridge's verdict (bridge.core.json_text): what is refused here would halt the bridge later.
        # It also judges serialized dicts: json.dumps writes 10**400 and lone surrogate escapes.
        parse_json(text)
    except NotJsonError as exc:
        raise InvalidEventError(f"event {event_id}: payload is not valid JSON text ({exc})") from exc
    return text


def _headers_json(headers: Mapping[str, str] | None, event_id: str) -> str | None:
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise InvalidEventError(f"event {event_id}: headers must be a mapping of str to str")
    for name, value in headers.items():
        if not isinstance(name, str) or not name:
            raise InvalidEventError(f"event {event_id}: header names must be non-empty strings, got {name!r}")
        if name in RESERVED_HEADERS:
            raise InvalidEventError(
                f"event {event_id}: header {name!r} is reserved, the bridge sets it from the row; rename it"
            )
        if not isinstance(value, str):
            raise InvalidEventError(
                f"event {event_id}: header {name!r} must be a string, got {type(value).__name__}; convert it"
            )
    text = json.dumps(dict(headers), separators=(",", ":"), ensure_ascii=False)
    try:
        parse_json(text)  # the bridge's verdict: a value with a lone surrogate cannot be stored or published
    except NotJsonError as exc:
        raise InvalidEventError(f"event {event_id}: headers are not valid JSON text ({exc}); fix the values") from exc
    return text


def _required_text(field: str, value: object, event_id: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidEventError(f"event {event_id}: {field} must be a non-empty string, got {value!r}")
    if len(value) > _LIMITS[field]:
        raise InvalidEventError(
            f"event {event_id}: {field} is {len(value)} characters, the column holds {_LIMITS[field]}"
        )
    return value


@dataclass(frozen=True, slots=True, init=False)
class OutboxEvent:
    """One event to append, validated when built. `payload` holds the JSON text exactly as it will be
    stored and published; `headers` become Kafka headers next to the bridge's own."""

    event_id: str
    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: str
    headers: Mapping[str, str] | None
    occurred_at: datetime | None
    schema_version: int
    _headers_json: str | None = field(repr=False, compare=False)

    def __init__(
        self,
        *,
        aggregate_type: str,
        aggregate_id: str,
        event_type: str,
        payload: JsonPayload,
        headers: Mapping[str, str] | None = None,
        event_id: str | None = None,
        occurred_at: datetime | None = None,
        schema_version: int = 1,
    ) -> None:
        event_id = str(uuid.uuid4()) if event_id is None else event_id
        label = event_id if isinstance(event_id, str) and event_id.strip() else "<no event_id>"
        object.__setattr__(self, "event_id", _required_text("event_id", event_id, label))
        object.__setattr__(self, "aggregate_type", _required_text("aggregate_type", aggregate_type, label))
        object.__setattr__(self, "aggregate_id", _required_text("aggregate_id", aggregate_id, label))
        object.__setattr__(self, "event_type", _required_text("event_type", event_type, label))
        object.__setattr__(self, "payload", _payload_text(payload, label))
        object.__setattr__(self, "_headers_json", _headers_json(headers, label))
        object.__setattr__(self, "headers", None if headers is None else MappingProxyType(dict(headers)))
        if occurred_at is not None and (not isinstance(occurred_at, datetime) or occurred_at.tzinfo is None):
            raise InvalidEventError(
                f"event {label}: occurred_at must be a timezone-aware datetime (e.g. datetime.now(UTC)), "
                f"got {occurred_at!r}"
            )
        object.__setattr__(self, "occurred_at", None if occurred_at is None else occurred_at.astimezone(UTC))
        if not isinstance(schema_version, int) or isinstance(schema_version, bool) or schema_version < 1:
            raise InvalidEventError(f"event {label}: schema_version must be an int >= 1, got {schema_version!r}")
        object.__setattr__(self, "schema_version", schema_version)

    def row(self, trace: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The INSERT parameters for this event, with the `trace` context headers unless it has its own."""
        headers = self._headers_json
        if trace is not None and not (self.headers and (TRACEPARENT in self.headers or TRACESTATE in self.headers)):
            headers = json.dumps({**(self.headers or {}), **trace}, separators=(",", ":"), ensure_ascii=False)
        return {
            "event_id": self.event_id,
            "aggregate_type": self.aggregate_type,
            "aggregate_id": self.aggregate_id,
            "event_type": self.event_type,
            "payload": self.payload,
            "headers": headers,
            "schema_version": self.schema_version,
            "given_occurred_at": self.occurred_at,
        }


# One statement for every event; occurred_at falls back to the database clock, like the column default,
# so a batch mixing given and missing timestamps stays one executemany.
_INSERT: Final = insert(domain_events).values(
    occurred_at=func.coalesce(bindparam("given_occurred_at", type_=UtcTimestamp()), utc_now())
)


def _connection(target: Connection | Session) -> Connection:
    if isinstance(target, Session):
        return target.connection()
    if isinstance(target, Connection):
        return target
    raise TypeError(f"append() needs a SQLAlchemy Connection or Session, not {type(target).__name__}")


def append(target: Connection | Session, events: Iterable[OutboxEvent]) -> None:
    """Insert `events`, in order, in the transaction of `target` (a `Connection` or ORM `Session`), each with the
    active span's trace context unless it has its own; the caller commits. On `DuplicateEventError` roll the
    transaction back: PostgreSQL has already aborted it, SQL Server has rolled it back (the error is raised inside
    the outbox trigger), and SQLite may hold the part of the batch inserted before the duplicate."""
    batch = list(events)
    for event in batch:
        if not isinstance(event, OutboxEvent):
            raise InvalidEventError(f"append() takes OutboxEvent objects, got {type(event).__name__}")
    if not batch:
        return
    repeated = sorted(event_id for event_id, n in Counter(e.event_id for e in batch).items() if n > 1)
    if repeated:
        raise DuplicateEventError(f"event_id repeated within one append: {', '.join(repeated)}")
    conn = _connection(target)
    trace = active_trace_headers()  # the transaction's span, the same for every event of the batch
    rows = [event.row(trace) for event in batch]
    try:
        if conn.dialect.name == "mssql":
            # One statement per event. The INSTEAD OF INSERT trigger numbers the rows of one statement
            # by (occurred_at, event_id): its `inserted` rows carry no VALUES order. One row per
            # statement keeps seq order = list order, which consumers rely on per aggregate.
            for row in rows:
                conn.execute(_INSERT, row)
        else:
            conn.execute(_INSERT, rows)
    except IntegrityError as exc:
        duplicates = _duplicates(conn, exc, [event.event_id for event in batch])
        if duplicates is None:
            raise store_error(exc, f"appending {len(batch)} event(s) to domain_events") from exc
        raise DuplicateEventError(
            f"event_id already in the outbox: {duplicates}; the event was appended before "
            "(a retry?), roll back this transaction or use a new event_id"
        ) from exc
    except DBAPIError as exc:
        raise store_error(exc, f"appending {len(batch)} event(s) to domain_events") from exc


def append_one(target: Connection | Session, event: OutboxEvent) -> None:
    """Insert one event in the transaction of `target`; see `append`."""
    append(target, [event])


_KEY_IN_MESSAGE: Final = (
    re.compile(r"Key \(event_id\)=\((.*)\) already exists"),  # PostgreSQL
    re.compile(r"duplicate key value is \((.*)\)"),  # SQL Server
)


def _duplicates(conn: Connection, exc: IntegrityError, event_ids: list[str]) -> str | None:
    """Which event_id(s) broke the unique constraint, as text for the message; None when the
    integrity error is about something else."""
    message = str(exc.orig)
    if EVENT_ID_UNIQUE not in message and "domain_events.event_id" not in message:
        return None
    for pattern in _KEY_IN_MESSAGE:
        found = pattern.search(message)
        if found:
            return found.group(1)
    # SQLite names the column but not the value. Its failed statement left the transaction usable, so
    # ask; rows this batch inserted before the failure are among those found, hence "one of".
    if conn.dialect.name == "sqlite":
        column = domain_events.c.event_id
        present = set(conn.execute(select(column).where(column.in_(event_ids))).scalars())
        ordered = [event_id for event_id in event_ids if event_id in present]
        if len(ordered) == 1:
            return ordered[0]
        if ordered:
            return f"one of {', '.join(ordered)}"
    return f"one of {', '.join(event_ids)}"
