"""A projection reads only what Kafka committed: the records of an aborted transaction (a fenced bridge's, in
exactly-once delivery) never reach its table. `PROJECTIONS_KAFKA_ISOLATION_LEVEL=read_committed` is the default."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from projections.examples import orders_current
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import OutboxEvent, produce
from tests.support import read_topic, record_seq


def placed(seq: int, order: str) -> OutboxEvent:
    payload = {"order_id": order, "customer": f"c-{order}", "amount": 10, "currency": "EUR"}
    return OutboxEvent(seq, order, "OrderPlaced", payload)


def _produce_then_abort(bootstrap: str, topic: str, events: list[OutboxEvent]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"aborted-{uuid.uuid4().hex}",
                         "partitioner": "murmur2_random"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for event in events:
        producer.produce(topic, key=event.aggregate_id.encode(), value=event.value(), headers=event.kafka_headers())
    assert producer.flush(30) == 0
    producer.abort_transaction(30)


def test_records_of_an_aborted_transaction_never_reach_a_projections_table(harness: Harness) -> None:
    topic = harness.topic([placed(1, "A"), placed(2, "B")])
    _produce_then_abort(harness.bootstrap, topic, [placed(3, "ghost-1"), placed(4, "ghost-2")])
    produce(harness.bootstrap, topic, [placed(3, "C")])  # the same seq, committed this time
    everything = read_topic(harness.bootstrap, topic, isolation_level="read_uncommitted")
    assert sorted(record_seq(m) for m in everything) == [1, 2, 3, 3, 4], "the aborted records are in the log"

    lake = harness.lake("lake")
    harness.run([orders_current], topic, lake)
    rows = harness.spark.read.format("delta").load(lake.table(orders_current.name)).collect()
    assert sorted((r["order_id"], r["seq"]) for r in rows) == [("A", 1), ("B", 2), ("C", 3)]
