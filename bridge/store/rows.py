"""Outbox rows as the bridge reads them, and the plain seq-ordered read that SQLite can rely on.

A row the bridge cannot convert (on SQLite, where any application may write any value into any
column with plain SQL: a BLOB payload, text that is not UTF-8, an `occurred_at` that is no timestamp)
is still returned, in its place in seq order, carrying why in `unreadable`. The record builder turns
it into a `PoisonEventError`, so it meets the poison policy like any other unpublishable row instead
of failing the whole read, over and over, before the policy is ever asked.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

from sqlalchemy import Select, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from bridge.core.records import OutboxRow
from bridge.schema import as_utc, domain_events
from bridge.store.failures import store_error

#: The portable columns, in `OutboxRow` order (every field but `unreadable`).
ROW_COLUMNS = tuple(domain_events.c[name] for name in OutboxRow._fields if name != "unreadable")


def rows_after(after: int, limit: int) -> Select[Any]:
    """The query for up to `limit` rows with seq above `after`, in seq order."""
    seq = domain_events.c.seq
    return select(*ROW_COLUMNS).where(seq > after).order_by(seq).limit(limit)


def select_after_sqlite(conn: Connection, after: int, limit: int) -> list[OutboxRow]:
    """`select_after` for SQLite, on the driver's own tuples: the bridge's hot read, without SQLAlchemy's
    per-row objects. `occurred_at` is ISO 8601 text there, parsed as UtcTimestamp does (`as_utc`).
    A row that cannot be converted comes back `unreadable` rather than failing the read."""
    try:
        try:
            raw = _fetch(conn, after, limit)
        except sqlite3.OperationalError as exc:
            if not str(exc).startswith(_NOT_UTF8):
                raise
            # The C fast path refuses the whole read for one undecodable value: read again, decoding in
            # Python, so that row alone is marked and the rows around it go on as usual.
            with _text_factory(conn, _decode_or_mark):
                raw = _fetch(conn, after, limit)
    except DBAPIError as exc:
        raise store_error(exc, f"reading domain_events after seq {after}") from exc
    except sqlite3.Error as exc:  # raised by the driver's own cursor, outside SQLAlchemy's translation
        kind = OperationalError if isinstance(exc, sqlite3.OperationalError) else DBAPIError
        raise store_error(kind(None, None, exc), f"reading domain_events after seq {after}") from exc
    return [sqlite_row(row) for row in raw]


#: How sqlite3 says a TEXT value is not UTF-8 (its default text factory decodes strictly).
_NOT_UTF8: Final = "Could not decode to UTF-8"
_TEXT_FIELDS: Final = ("event_id", "aggregate_type", "aggregate_id", "event_type", "payload")


def _fetch(conn: Connection, after: int, limit: int) -> Sequence[Any]:
    result = conn.execute(rows_after(after, limit))
    try:
        return result.cursor.fetchall()
    finally:
        result.close()


class _NotUtf8(NamedTuple):
    """A TEXT value that is not UTF-8, as `_decode_or_mark` found it."""

    data: bytes
    error: UnicodeDecodeError


def _decode_or_mark(data: bytes) -> str | _NotUtf8:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        return _NotUtf8(data, exc)


@contextmanager
def _text_factory(conn: Connection, factory: Callable[[bytes], Any]) -> Iterator[None]:
    """Decode TEXT values with `factory` for the duration; the pooled connection gets its default back."""
    driver: Any = conn.connection.driver_connection
    previous = driver.text_factory
    driver.text_factory = factory
    try:
        yield
    finally:
        driver.text_factory = previous


def sqlite_row(raw: Sequence[Any]) -> OutboxRow:
    """An `OutboxRow` from the driver's tuple (in `ROW_COLUMNS` order), or an `unreadable` one saying why."""
    seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers, occurred_at, version = raw
    if (
        type(payload) is str
        and type(event_id) is str
        and type(aggregate_type) is str
        and type(aggregate_id) is str
        and type(event_type) is str
        and (headers is None or type(headers) is str)
        and type(version) is int
    ):
        try:
            return OutboxRow(seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers,
                             as_utc(occurred_at), version)
        except (ValueError, TypeError):
            pass  # occurred_at: said by unreadable_row
    return unreadable_row(raw)


def unreadable_row(raw: Sequence[Any]) -> OutboxRow:
    """The row as far as it can be read, with every reason it cannot be published in `unreadable`."""
    problems: list[str] = []
    values = dict(zip(("seq", *_TEXT_FIELDS, "headers", "occurred_at", "schema_version"), raw, strict=True))
    texts: dict[str, str] = {}
    for name in (*_TEXT_FIELDS, "headers"):
        value = values[name]
        if value is None and name == "headers":
            continue
        texts[name], problem = _as_text(name, value)
        if problem:
            problems.append(problem)
    occurred_at = datetime.now(UTC)  # a stand-in: the dead-letter copy's reason says what was stored
    try:
        occurred_at = as_utc(values["occurred_at"])
    except (ValueError, TypeError):
        shown = _as_text("occurred_at", values["occurred_at"])[0]
        problems.append(
            f"occurred_at {shown[:64]!r} is not an ISO 8601 timestamp; store e.g. 2025-01-31T12:00:00.000000Z "
            "(the column default does)"
        )
    version = values["schema_version"]
    if type(version) is not int:
        problems.append(f"schema_version {version!r} is not an integer")
        version = 0
    return OutboxRow(
        seq=int(values["seq"]),
        event_id=texts["event_id"],
        aggregate_type=texts["aggregate_type"],
        aggregate_id=texts["aggregate_id"],
        event_type=texts["event_type"],
        payload=texts["payload"],
        headers=texts.get("headers"),
        occurred_at=occurred_at,
        schema_version=version,
        unreadable="; ".join(problems) or "the row could not be read",
    )


def _as_text(name: str, value: Any) -> tuple[str, str | None]:
    """A printable stand-in for a column value, and what is wrong with it (None when nothing is)."""
    if type(value) is str:
        return value, None
    if isinstance(value, _NotUtf8):
        where = value.error.start
        return value.data.decode(errors="replace"), (
            f"{name} is not UTF-8 text (byte 0x{value.data[where]:02x} at offset {where}); rewrite it as UTF-8"
        )
    if isinstance(value, bytes):
        return value.decode(errors="replace"), (
            f"{name} is a BLOB, not text; store it as UTF-8 text (e.g. CAST(... AS TEXT))"
        )
    return str(value), f"{name} is {type(value).__name__} {value!r}, not text"


def select_after(conn: Connection, after: int, limit: int) -> list[OutboxRow]:
    """Rows with seq above `after`, in seq order. Safe to tail only where commit order is seq order
    (SQLite, one writer at a time); elsewhere use the dialect's horizon-aware read."""
    try:
        result = conn.execute(rows_after(after, limit))
    except DBAPIError as exc:
        raise store_error(exc, f"reading domain_events after seq {after}") from exc
    # Positional: the columns are selected in OutboxRow's field order (mapping each row costs more).
    return [OutboxRow(*row) for row in result]


def event_id_at(engine: Engine, seq: int) -> str | None:
    """The event_id of the outbox row at `seq`, None if there is none (deleted, rolled back, or another outbox)."""
    try:
        with engine.connect() as conn:
            found = conn.execute(select(domain_events.c.event_id).where(domain_events.c.seq == seq)).scalar()
    except DBAPIError as exc:
        raise store_error(exc, f"reading the event at seq {seq}") from exc
    return None if found is None else str(found)
