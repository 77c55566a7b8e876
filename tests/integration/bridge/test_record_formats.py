"""Both record formats through the real bridge and broker: by default every record is byte for byte the plain
format (key, value and headers as `build_record` makes them from the row); with BRIDGE_RECORD_FORMAT=cloudevents
the official CloudEvents SDK reads every record as its row's event."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from cloudevents.kafka import KafkaMessage, from_binary
from sqlalchemy import create_engine, select

from bridge.core.records import OutboxRow, build_record
from bridge.migrate import upgrade
from bridge.store.rows import ROW_COLUMNS
from tests.support import bridge_config, insert_events, read_topic, start_bridge, wait_until

pytestmark = pytest.mark.integration

EVENTS = 40


def _rows(url: str) -> dict[int, OutboxRow]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = [OutboxRow.from_mapping(r) for r in conn.execute(select(*ROW_COLUMNS)).mappings()]
    engine.dispose()
    return {row.seq: row for row in rows}


def _publish(url: str, bootstrap: str, **settings: str) -> tuple[str, list[Any]]:
    upgrade(url)
    insert_events(url, EVENTS)
    config = bridge_config(url, bootstrap, **settings)
    bridge = start_bridge(config)
    wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == EVENTS, 60,
               f"{EVENTS} events published")
    assert bridge.stop() == 0
    return config.topic_for("order"), read_topic(bootstrap, config.topic_for("order"))


def test_by_default_every_record_is_byte_for_byte_the_plain_format(postgres_url: str, kafka_bootstrap: str) -> None:
    topic, records = _publish(postgres_url, kafka_bootstrap)
    rows = _rows(postgres_url)
    assert len(records) == EVENTS
    for message in records:
        headers = message.headers()
        expected = build_record(rows[int(dict(headers)["seq"])], lambda _type: topic)
        assert message.key() == expected.key and message.value() == expected.value
        assert headers == expected.headers, "the same headers, in the same order, nothing added"


def test_with_cloudevents_the_official_sdk_reads_every_record_as_its_rows_event(
    postgres_url: str, kafka_bootstrap: str
) -> None:
    _topic, records = _publish(postgres_url, kafka_bootstrap, record_format="cloudevents",
                               cloudevents_source="https://shop.example/orders")
    rows = _rows(postgres_url)
    assert len(records) == EVENTS
    for message in records:
        headers = dict(message.headers())
        row = rows[int(headers["seq"])]
        event = from_binary(KafkaMessage(headers, message.key(), message.value()))
        assert event["specversion"] == "1.0"
        assert event["id"] == row.event_id
        assert event["source"] == "https://shop.example/orders"
        assert event["type"] == row.event_type
        assert event["subject"] == row.aggregate_id
        assert datetime.fromisoformat(event["time"]) == row.occurred_at
        assert event["datacontenttype"] == "application/json"
        assert event.data == json.loads(row.payload)
        assert message.value() == row.payload.encode(), "the value is still the payload, byte for byte"
        assert headers["event_id"] == row.event_id.encode(), "the plain format's headers stay"
