"""The poison gate builds each row's record in the configured format: by default exactly today's plain record,
with BRIDGE_RECORD_FORMAT=cloudevents the CloudEvent of the same row; a range replay uses the same format."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bridge.config import BridgeConfig, PoisonPolicy, load_config
from bridge.core.cloudevents import build_cloudevent
from bridge.core.records import OutboxRow, build_record
from bridge.core.refusals import Refusals
from bridge.daemon.poison import PoisonGate, record_builder
from bridge.kafka.testing import AcceptingTopicGuard
from bridge.metrics import BridgeMetrics

pytestmark = pytest.mark.unit

ROW = OutboxRow(seq=3, event_id="ev-3", aggregate_type="order", aggregate_id="o-9", event_type="OrderPlaced",
                payload='{"total": 5}', headers='{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-'
                                                'b7ad6b7169203331-01"}',
                occurred_at=datetime(2025, 6, 1, 8, 30, tzinfo=UTC), schema_version=1)


def _gate(config: BridgeConfig) -> PoisonGate:
    return PoisonGate(config.topics, PoisonPolicy.HALT, AcceptingTopicGuard(), BridgeMetrics(), Refusals())


def test_by_default_the_record_is_byte_for_byte_the_plain_format() -> None:
    record = _gate(load_config(env={"BRIDGE_NAME": "orders"})).record_for(ROW)
    assert (record.topic, record.key, record.value) == ("outbox.event.order", b"o-9", b'{"total": 5}')
    assert record.headers == [
        ("event_id", b"ev-3"),
        ("event_type", b"OrderPlaced"),
        ("aggregate_type", b"order"),
        ("seq", b"3"),
        ("occurred_at", b"2025-06-01T08:30:00+00:00"),
        ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ]
    assert record == build_record(ROW, lambda t: f"outbox.event.{t}")


def test_with_cloudevents_the_record_is_the_rows_cloudevent_from_this_bridge() -> None:
    config = load_config(env={"BRIDGE_NAME": "orders", "BRIDGE_RECORD_FORMAT": "cloudevents"})
    record = _gate(config).record_for(ROW)
    assert record == build_cloudevent(ROW, lambda t: f"outbox.event.{t}", b"urn:outbox-bridge:orders")
    assert dict(record.headers)["ce_source"] == b"urn:outbox-bridge:orders"


@pytest.mark.parametrize("record_format", ["plain", "cloudevents"])
def test_a_range_replay_publishes_in_the_bridges_format(record_format: str) -> None:
    config = load_config(env={"BRIDGE_RECORD_FORMAT": record_format})
    build = record_builder(config.topics)
    assert build(ROW, config.topic_for, 1_000_000) == _gate(config).record_for(ROW)
