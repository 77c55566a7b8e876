"""The projections read every record and value format of the bridge alike: the same events as plain records, as
CloudEvents and with values in a schema registry's wire format (json-schema) give the same tables, and a
declaration that keeps the trace id gets the one in each event's `traceparent`, also on a table that existed
before it was turned on."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer

from bridge.core.cloudevents import build_cloudevent
from bridge.core.records import KafkaRecord, OutboxRow, build_record, record_and_payload
from bridge.core.wire_format import schema_prefix
from bridge.schemas.values import RegisteredSchema, SchemaValues
from projections import EventLog, LatestState, Projection
from projections.runner import prepare
from tests.integration.projections.conftest import Harness

pytestmark = pytest.mark.integration

TRACE = "0af7651916cd43dd8448eb211c80319c"
PLACED = "order_id STRING, status STRING"
CURRENT = Projection(name="orders_now", kind=LatestState(), event_types={"OrderPlaced": PLACED, "OrderPaid": PLACED},
                     aggregate_types=("order",), trace_id=True)
LOG = Projection(name="order_log", kind=EventLog(), event_types={"OrderPlaced": PLACED, "OrderPaid": PLACED},
                 aggregate_types=("order",), trace_id=True)


def _rows() -> list[OutboxRow]:
    rows = []
    for seq in range(1, 9):
        order = f"o-{seq % 3}"
        # Every other event written in a trace (its span id the seq); the others outside any.
        headers = {"tenant": "t-1", **({"traceparent": f"00-{TRACE}-{seq:016x}-01"} if seq % 2 else {})}
        rows.append(OutboxRow(seq=seq, event_id=f"ev-{seq}", aggregate_type="order", aggregate_id=order,
                              event_type="OrderPlaced" if seq < 4 else "OrderPaid",
                              payload=json.dumps({"order_id": order, "status": f"s{seq}"}), headers=json.dumps(headers),
                              occurred_at=datetime(2025, 5, 1, tzinfo=UTC) + timedelta(seconds=seq),
                              schema_version=1))
    return rows


def _produce(bootstrap: str, topic: str, records: list[KafkaRecord]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for record in records:
        producer.produce(topic, record.value, record.key, headers=record.headers)
    assert producer.flush(30) == 0


def _framed(topic: str) -> list[KafkaRecord]:
    """The records as the bridge publishes them with BRIDGE_VALUE_FORMAT=json-schema (a schema id per event type)."""
    ids = {"OrderPlaced": 3, "OrderPaid": 4}

    def lookup(on_topic: str, event_type: str) -> RegisteredSchema:
        schema_id = ids[event_type]
        return RegisteredSchema(f"{on_topic}-{event_type}", schema_id, schema_prefix(schema_id), lambda _value: None)

    values = SchemaValues(lookup)
    records = [values.framed(row, *record_and_payload(row, lambda _t: topic)) for row in _rows()]
    assert all(record.value.startswith(b"\x00\x00\x00\x00") for record in records)
    return records


def test_plain_cloudevents_and_framed_records_give_the_same_tables_with_the_writers_trace_ids(
    harness: Harness,
) -> None:
    plain, cloudevents = harness.new_topic("plain", partitions=2), harness.new_topic("ce", partitions=2)
    framed = harness.new_topic("framed", partitions=2)
    _produce(harness.bootstrap, plain, [build_record(row, lambda _t: plain) for row in _rows()])
    _produce(harness.bootstrap, cloudevents,
             [build_cloudevent(row, lambda _t: cloudevents, b"urn:outbox-bridge:test") for row in _rows()])
    _produce(harness.bootstrap, framed, _framed(framed))
    lakes = harness.lake("plain"), harness.lake("ce"), harness.lake("framed")
    harness.run_together([([CURRENT, LOG], plain, lakes[0]), ([CURRENT, LOG], cloudevents, lakes[1]),
                          ([CURRENT, LOG], framed, lakes[2])])

    for projection in (CURRENT, LOG):
        assert harness.rows(projection, lakes[0]) == harness.rows(projection, lakes[1]), projection.name
        assert harness.rows(projection, lakes[0]) == harness.rows(projection, lakes[2]), projection.name
    payloads = {row["seq"]: row["payload"] for row in map(json.loads, harness.rows(LOG, lakes[2]))}
    assert payloads == {row.seq: row.payload for row in _rows()}, "the payload as written, without its frame"
    current = {row["aggregate_id"]: row for row in map(json.loads, harness.rows(CURRENT, lakes[0]))}
    # The latest event of each key: o-0 seq 6 (untraced), o-1 seq 7 (traced), o-2 seq 8 (untraced).
    assert {key: (row["seq"], row["trace_id"]) for key, row in current.items()} == {
        "o-0": (6, None), "o-1": (7, TRACE), "o-2": (8, None)}
    log = {row["seq"]: row for row in map(json.loads, harness.rows(LOG, lakes[1]))}
    assert [log[seq]["trace_id"] for seq in range(1, 9)] == [TRACE, None] * 4
    assert {h["key"] for h in log[1]["headers"]} == {"tenant", "traceparent"}, "no CloudEvents attribute in headers"


def test_turning_the_trace_id_on_adds_the_column_to_an_existing_table(harness: Harness) -> None:
    lake = harness.lake("existing")
    prepare(harness.spark, dataclasses.replace(CURRENT, trace_id=False), lake)
    assert "trace_id" not in harness.spark.read.format("delta").load(lake.table(CURRENT.name)).columns
    prepare(harness.spark, CURRENT, lake)
    assert "trace_id" in harness.spark.read.format("delta").load(lake.table(CURRENT.name)).columns
