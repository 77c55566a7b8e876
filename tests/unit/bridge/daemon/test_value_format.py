"""The poison gate with BRIDGE_VALUE_FORMAT=json-schema: framed values within the topic's limit, and a payload
that fails its schema under the poison policy (halted naming it, or dead-lettered with the reason and the
payload as written); a range replay frames as the live bridge does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bridge.config import PoisonPolicy, load_config
from bridge.core.records import OutboxRow
from bridge.core.refusals import Refusals
from bridge.core.wire_format import schema_prefix, unframe
from bridge.daemon.poison import PoisonGate, record_builder
from bridge.errors import PoisonEventError
from bridge.kafka.testing import AcceptingTopicGuard
from bridge.metrics import BridgeMetrics
from bridge.schemas.values import RegisteredSchema, SchemaValues
from bridge.store.dead_letters import DeadLetter

pytestmark = pytest.mark.unit

CONFIG = load_config(env={"BRIDGE_NAME": "orders", "BRIDGE_VALUE_FORMAT": "json-schema",
                          "BRIDGE_SCHEMA_REGISTRY_URL": "http://127.0.0.1:8081"})


def _row(seq: int, payload: str) -> OutboxRow:
    return OutboxRow(seq=seq, event_id=f"ev-{seq}", aggregate_type="order", aggregate_id="o-9",
                     event_type="OrderPlaced", payload=payload, headers=None,
                     occurred_at=datetime(2025, 6, 1, 8, 30, tzinfo=UTC), schema_version=1)


def _lookup(topic: str, event_type: str) -> RegisteredSchema:
    def check(value: Any) -> str | None:
        return None if isinstance(value, dict) and "total" in value else "'total' is a required property"
    return RegisteredSchema(f"{topic}-{event_type}", 4, schema_prefix(4), check)


def _gate(policy: PoisonPolicy, letters: list[DeadLetter] | None = None, limit: int = 1_000_000) -> PoisonGate:
    return PoisonGate(CONFIG.topics, policy, AcceptingTopicGuard(), BridgeMetrics(), Refusals(), limit,
                      on_dead_letter=(letters if letters is not None else []).append, values=SchemaValues(_lookup))


def test_a_valid_payload_is_sent_framed_to_its_own_topic() -> None:
    record = _gate(PoisonPolicy.HALT).record_for(_row(1, '{"total": 5}'))
    assert record.topic == "outbox.event.order"
    assert unframe(record.value) == (4, b'{"total": 5}')


def test_a_failing_payload_halts_the_bridge_under_halt() -> None:
    with pytest.raises(PoisonEventError, match="'total' is a required property") as raised:
        _gate(PoisonPolicy.HALT).record_for(_row(2, '{"sum": 5}'))
    assert raised.value.seq == 2


def test_a_failing_payload_is_dead_lettered_as_written_with_the_reason() -> None:
    letters: list[DeadLetter] = []
    record = _gate(PoisonPolicy.DEAD_LETTER, letters).record_for(_row(2, '{"sum": 5}'))
    assert record.topic == "outbox.dlq.orders"
    assert record.value == b'{"sum": 5}'
    assert "'total' is a required property" in dict(record.headers)["dlq_reason"].decode()
    assert [letter.seq for letter in letters] == [2]


def test_the_frame_counts_against_the_producers_limit() -> None:
    payload = '{"total": "' + "x" * 300 + '"}'
    fits = _gate(PoisonPolicy.HALT, limit=10_000).record_for(_row(3, payload))
    with pytest.raises(PoisonEventError, match="over the"):
        _gate(PoisonPolicy.HALT, limit=fits.size - 1).record_for(_row(3, payload))
    assert _gate(PoisonPolicy.HALT, limit=fits.size).record_for(_row(3, payload)) == fits


def test_a_range_replay_frames_as_the_live_bridge() -> None:
    build = record_builder(CONFIG.topics, SchemaValues(_lookup))
    row = _row(5, '{"total": 1}')
    assert build(row, CONFIG.topic_for, 1_000_000) == _gate(PoisonPolicy.HALT).record_for(row)
