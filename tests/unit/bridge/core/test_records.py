"""From an outbox row to a Kafka record: the format the design fixes, and every poison kind refused
with the seq and a reason an operator can act on."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.core.records import KafkaRecord, OutboxRow, build_record, iso_timestamp, record_and_payload
from bridge.errors import PoisonEventError


def _route(aggregate_type: str) -> str:
    if " " in aggregate_type or not aggregate_type:
        raise ValueError(f"aggregate_type {aggregate_type!r} gives an illegal topic name")
    return f"outbox.event.{aggregate_type}"


def _row(**changes: object) -> OutboxRow:
    values: dict[str, object] = {
        "seq": 42, "event_id": "ev-42", "aggregate_type": "order", "aggregate_id": "o-7",
        "event_type": "OrderPlaced", "payload": '{ "total" : 12.50,"items":[ ] }', "headers": None,
        "occurred_at": datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), "schema_version": 1,
    }
    values.update(changes)
    return OutboxRow(**values)  # type: ignore[arg-type]


def test_the_record_has_the_designed_topic_key_value_and_headers() -> None:
    record = build_record(_row(headers='{"trace_id": "t-1", "attempt": 2}'), _route)
    assert record.seq == 42
    assert record.topic == "outbox.event.order"
    assert record.key == b"o-7"
    assert record.value == b'{ "total" : 12.50,"items":[ ] }', "the payload bytes, unchanged"
    assert record.headers == [
        ("event_id", b"ev-42"),
        ("event_type", b"OrderPlaced"),
        ("aggregate_type", b"order"),
        ("seq", b"42"),
        ("occurred_at", b"2025-01-02T03:04:05.678901+00:00"),
        ("trace_id", b"t-1"),
        ("attempt", b"2"),  # non-string values as compact JSON
    ]


def test_keys_and_payloads_are_utf8() -> None:
    record = build_record(_row(aggregate_id="клиент-é", payload='{"name": "Zoë"}'), _route)
    assert record.key == "клиент-é".encode()
    assert record.value == '{"name": "Zoë"}'.encode()


def test_the_record_comes_with_the_payloads_value_as_parsed_for_the_json_check() -> None:
    row = _row(headers='{"trace_id": "t-1"}')
    record, payload = record_and_payload(row, _route)
    assert record == build_record(row, _route)
    assert payload == {"total": 12.5, "items": []}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"aggregate_id": ""}, "aggregate_id is empty"),
        ({"payload": '{"unterminated": '}, "payload is not valid JSON"),
        ({"aggregate_type": "bad type!"}, "unroutable"),
        ({"headers": "not json"}, "headers column is not valid JSON"),
        ({"headers": '["a"]'}, "headers column must be a JSON object"),
        ({"payload": '"' + "x" * 3000 + '"'}, "over the 2000-byte limit of topic outbox.event.order"),
    ],
)
def test_each_poison_kind_is_refused_naming_the_seq_and_why(changes: dict[str, object], reason: str) -> None:
    with pytest.raises(PoisonEventError) as caught:
        build_record(_row(**changes), _route, max_message_bytes=2000)
    assert caught.value.seq == 42
    assert reason in caught.value.reason
    assert "seq=42" in str(caught.value)


def test_the_size_limit_counts_key_value_and_headers() -> None:
    record = build_record(_row(), _route)
    assert build_record(_row(), _route, max_message_bytes=record.size) == record
    with pytest.raises(PoisonEventError):
        build_record(_row(), _route, max_message_bytes=record.size - 1)


@settings(max_examples=500)
@given(moment=st.datetimes(timezones=st.one_of(st.none(), st.just(UTC), st.timezones())))
def test_the_occurred_at_header_is_the_timestamps_isoformat(moment: datetime) -> None:
    # orjson writes it (faster); the text must be exactly what isoformat() gives, for any timestamp.
    assert iso_timestamp(moment) == moment.isoformat().encode()


@given(headers=st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)
                         .map(json.dumps)),
       aggregate_id=st.text(min_size=1, max_size=12), payload=st.sampled_from(['{}', '{"é": "ü"}', '[1, 2.5]']))
def test_the_size_of_a_record_counts_every_byte_of_key_value_and_headers(headers: str | None, aggregate_id: str,
                                                                          payload: str) -> None:
    record = build_record(_row(headers=headers, aggregate_id=aggregate_id, payload=payload), _route)
    assert record.size == KafkaRecord.of(record.seq, record.topic, record.key, record.value, record.headers).size
