"""The cloudevents record format: the plain record plus the event's CloudEvents attributes, which the official
SDK's Kafka binding reads back as the row's event; sizes and refusals as for the plain format."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from cloudevents.kafka import KafkaMessage, from_binary

from bridge.core.cloudevents import build_cloudevent
from bridge.core.records import OutboxRow, build_record
from bridge.errors import PoisonEventError

pytestmark = pytest.mark.unit

SOURCE = b"urn:outbox-bridge:orders"


def _route(aggregate_type: str) -> str:
    return f"outbox.event.{aggregate_type}"


def _row(**changes: object) -> OutboxRow:
    values: dict[str, object] = {
        "seq": 42, "event_id": "ev-42", "aggregate_type": "order", "aggregate_id": "o-7",
        "event_type": "OrderPlaced", "payload": '{ "total" : 12.50 }', "headers": None,
        "occurred_at": datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), "schema_version": 1,
    }
    values.update(changes)
    return OutboxRow(**values)  # type: ignore[arg-type]


def test_the_record_is_the_plain_one_plus_the_cloudevents_attributes() -> None:
    row = _row(headers='{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}')
    plain = build_record(row, _route)
    record = build_cloudevent(row, _route, SOURCE)
    assert (record.seq, record.topic, record.key, record.value) == (plain.seq, plain.topic, plain.key, plain.value)
    assert record.headers[: len(plain.headers)] == plain.headers, "the design's headers and the row's stay first"
    assert record.headers[len(plain.headers):] == [
        ("ce_specversion", b"1.0"),
        ("ce_id", b"ev-42"),
        ("ce_source", SOURCE),
        ("ce_type", b"OrderPlaced"),
        ("ce_time", b"2025-01-02T03:04:05.678901+00:00"),
        ("ce_subject", b"o-7"),
        ("content-type", b"application/json"),
    ]
    assert record.size == plain.size + sum(len(n) + len(v) for n, v in record.headers[len(plain.headers):])


def test_the_official_sdk_reads_the_record_as_the_rows_event() -> None:
    row = _row(headers='{"tenant": "t-1"}')
    record = build_cloudevent(row, _route, SOURCE)
    event = from_binary(KafkaMessage(dict(record.headers), record.key, record.value))
    assert event["specversion"] == "1.0"
    assert event["id"] == row.event_id
    assert event["source"] == SOURCE.decode()
    assert event["type"] == row.event_type
    assert datetime.fromisoformat(event["time"]) == row.occurred_at
    assert event["subject"] == row.aggregate_id
    assert event["datacontenttype"] == "application/json"
    assert event.data == json.loads(row.payload)


def test_a_row_header_named_like_an_attribute_is_left_out_so_each_attribute_is_sent_once() -> None:
    row = _row(headers='{"ce_type": "com.example.other", "content-type": "text/plain", "ce_dataschema": "s"}')
    record = build_cloudevent(row, _route, SOURCE)
    names = [name for name, _ in record.headers]
    assert names.count("ce_type") == 1 and names.count("content-type") == 1
    assert dict(record.headers)["ce_type"] == b"OrderPlaced"
    assert ("ce_dataschema", b"s") in record.headers, "other attributes (extensions) a writer sets are kept"
    assert record.size == build_record(_row(headers='{"ce_dataschema": "s"}'), _route).size + sum(
        len(n) + len(v) for n, v in record.headers[6:])


def test_a_record_over_the_limit_only_with_the_attributes_is_poison_naming_its_size() -> None:
    plain = build_record(_row(), _route)
    with pytest.raises(PoisonEventError, match=r"record is \d+ bytes, over the \d+-byte limit") as raised:
        build_cloudevent(_row(), _route, SOURCE, max_message_bytes=plain.size + 10)
    assert raised.value.seq == 42


def test_a_row_that_is_poison_in_the_plain_format_is_poison_in_this_one_for_the_same_reason() -> None:
    with pytest.raises(PoisonEventError, match="aggregate_id is empty"):
        build_cloudevent(_row(aggregate_id=""), _route, SOURCE)
