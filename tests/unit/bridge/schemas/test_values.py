"""Framed values: the payload bytes as written behind the subject's schema id, once the payload passes its
schema; a payload that fails, or an event type without a schema, is poison; the registry is asked once per
subject, and a missing one again only after a while."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bridge.core.records import OutboxRow, record_and_payload
from bridge.core.wire_format import schema_prefix, unframe
from bridge.errors import PoisonEventError, SchemaMissingError
from bridge.schemas.values import RegisteredSchema, SchemaValues

pytestmark = pytest.mark.unit


def _row(seq: int = 3, event_type: str = "OrderPlaced", payload: str = '{ "total" : 5 }') -> OutboxRow:
    return OutboxRow(seq=seq, event_id=f"ev-{seq}", aggregate_type="order", aggregate_id="o-9",
                     event_type=event_type, payload=payload, headers=None,
                     occurred_at=datetime(2025, 6, 1, 8, 30, tzinfo=UTC), schema_version=1)


def _route(aggregate_type: str) -> str:
    return f"outbox.event.{aggregate_type}"


def _needs_total(value: Any) -> str | None:
    return None if isinstance(value, dict) and isinstance(value.get("total"), int) else "'total' is required"


class Registry:
    """A lookup that counts its questions; event types it does not know have no schema."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        self.known = {"OrderPlaced": 7}

    def __call__(self, topic: str, event_type: str) -> RegisteredSchema:
        self.asked.append((topic, event_type))
        if event_type not in self.known:
            raise SchemaMissingError(f"no schema registered for subject {topic}-{event_type}")
        schema_id = self.known[event_type]
        return RegisteredSchema(f"{topic}-{event_type}", schema_id, schema_prefix(schema_id), _needs_total)


def test_the_value_is_the_payload_as_written_behind_the_schema_id() -> None:
    row = _row()
    plain, payload = record_and_payload(row, _route)
    framed = SchemaValues(Registry()).framed(row, plain, payload)
    assert unframe(framed.value) == (7, b'{ "total" : 5 }')
    assert framed.size == plain.size + 5
    assert (framed.topic, framed.key, framed.headers) == (plain.topic, plain.key, plain.headers)


def test_the_registry_is_asked_once_per_subject_not_per_event() -> None:
    registry = Registry()
    values = SchemaValues(registry)
    for seq in range(1, 50):
        values.framed(_row(seq), *record_and_payload(_row(seq), _route))
    assert registry.asked == [("outbox.event.order", "OrderPlaced")]


def test_a_payload_failing_its_schema_is_poison_naming_the_subject_and_why() -> None:
    row = _row(seq=11, payload='{"total": "five"}')
    with pytest.raises(PoisonEventError) as raised:
        SchemaValues(Registry()).framed(row, *record_and_payload(row, _route))
    assert raised.value.seq == 11
    assert "outbox.event.order-OrderPlaced (id 7)" in raised.value.reason
    assert "'total' is required" in raised.value.reason


def test_an_event_type_without_a_schema_is_poison_and_asked_again_only_after_a_while() -> None:
    registry = Registry()
    now = [100.0]
    values = SchemaValues(registry, retry_missing_s=60, clock=lambda: now[0])
    row = _row(event_type="OrderShipped")
    for _ in range(3):
        with pytest.raises(PoisonEventError, match="no schema registered for subject"):
            values.framed(row, *record_and_payload(row, _route))
    assert len(registry.asked) == 1
    registry.known["OrderShipped"] = 8
    now[0] += 61
    assert unframe(values.framed(row, *record_and_payload(row, _route)).value)[0] == 8
    assert len(registry.asked) == 2
