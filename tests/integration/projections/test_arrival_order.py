"""Every kind's table depends only on the set of events, not on how they are batched or in what order they arrive."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from projections import runner
from projections.declaration import Projection
from projections.errors import RefusedError
from projections.examples import ORDER_EVENTS, PROJECTIONS
from projections.kinds import Event, Fold, LatestState, State
from projections.lake import delete_path
from projections.txn import Txn
from tests.integration.projections.conftest import Harness, on_topic
from tests.integration.projections.events import BASE_TIME, OutboxEvent, order_lifecycle, produce

pytestmark = pytest.mark.integration


def trail(state: State | None, event: Event) -> State:
    """An order-sensitive fold: the seqs in the order they were folded."""
    before = (state or {}).get("trail")
    return {"trail": f"{before},{event.seq}" if before else str(event.seq)}


order_trail = Projection(
    name="order_trail",
    kind=Fold(function=trail, state="trail STRING"),
    event_types=ORDER_EVENTS,
    aggregate_types=("order",),
    key="order_id",
)


def placed(seq: int, order: str) -> OutboxEvent:
    payload = {"order_id": order, "customer": "c", "amount": 10, "currency": "EUR"}
    return OutboxEvent(seq, order, "OrderPlaced", payload)


def paid(seq: int, order: str) -> OutboxEvent:
    return OutboxEvent(seq, order, "OrderPaid", {"order_id": order, "amount": 10})


def test_an_older_event_in_a_later_batch_is_folded_as_if_it_had_come_in_seq_order(harness: Harness) -> None:
    lake = harness.lake("lake")
    topic = harness.topic([placed(1, "X"), paid(3, "X")])
    harness.run([order_trail], topic, lake)
    produce(harness.bootstrap, topic, [paid(2, "X")])  # X@2 arrives after X@3 was folded
    harness.run([order_trail], topic, lake)

    row = harness.spark.read.format("delta").load(lake.table(order_trail.name)).collect()
    assert [(r["order_id"], r["trail"], r["seq"], r["is_deleted"]) for r in row] == [("X", "1,2,3", 3, False)]


def test_a_fold_keyed_by_a_payload_field_spanning_partitions_folds_every_event(harness: Harness) -> None:
    # One order's events under Kafka keys that hash to different partitions, drained one record per batch.
    events = [
        dataclasses.replace(e, aggregate_id=f"shard-{e.seq % 4}")
        for e in [placed(1, "Y"), *[paid(seq, "Y") for seq in range(2, 13)]]
    ]
    lake = harness.lake("lake")
    topic = harness.topic(events, partitions=4)
    harness.run([order_trail], topic, lake, max_offsets_per_trigger=2)

    rows = harness.spark.read.format("delta").load(lake.table(order_trail.name)).collect()
    assert [(r["order_id"], r["trail"], r["seq"]) for r in rows] == [("Y", ",".join(map(str, range(1, 13))), 12)]


class Crash(RuntimeError):
    """Stands for the driver dying between two Delta commits of one batch."""


def test_a_refold_interrupted_between_the_event_store_and_the_table_ends_as_if_uninterrupted(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.errors import StreamingQueryException

    lake = harness.lake("lake")
    topic = harness.topic([placed(1, "X"), paid(3, "X")])
    harness.run([order_trail], topic, lake)
    produce(harness.bootstrap, topic, [paid(2, "X")])

    # The late batch's first write keeps X@2 in the event store; the driver dies before the table's write.
    original = Txn.applied_once
    writes: list[int] = []

    @contextmanager
    def crash_before_the_table(self: Txn, session: Any) -> Iterator[None]:
        writes.append(self.version)
        if len(writes) == 2:
            raise Crash("dies after the event store commit, before the table's")
        with original(self, session):
            yield

    monkeypatch.setattr(Txn, "applied_once", crash_before_the_table)
    query = runner.start(harness.spark, on_topic(order_trail, topic), harness.settings(lake))
    with pytest.raises(StreamingQueryException, match="before the table's"):
        query.awaitTermination()
    monkeypatch.undo()
    store = harness.spark.read.format("delta").load(lake.staging(order_trail.name))
    assert sorted(r["seq"] for r in store.collect()) == [1, 2, 3]
    table = harness.spark.read.format("delta").load(lake.table(order_trail.name))
    assert [r["trail"] for r in table.collect()] == ["1,3"]

    harness.run([order_trail], topic, lake)  # Spark runs the batch again: the store write is skipped
    table = harness.spark.read.format("delta").load(lake.table(order_trail.name))
    assert [(r["trail"], r["seq"]) for r in table.collect()] == [("1,2,3", 3)]


def test_a_fold_table_without_its_event_store_is_refused_rather_than_refolded_from_nothing(
    harness: Harness,
) -> None:
    from delta.tables import DeltaTable

    lake = harness.lake("lake")
    harness.run([order_trail], harness.topic([placed(1, "X")]), lake)
    store = lake.staging(order_trail.name)
    delete_path(store)  # as a table built before folds kept their events
    with pytest.raises(RefusedError, match="replay order_trail --from-offset earliest"):
        runner.prepare(harness.spark, order_trail, lake)
    assert not DeltaTable.isDeltaTable(harness.spark, store)


# ------------------------------------------------------------------ every kind, batched and ordered two ways

orders_latest_row = dataclasses.replace(
    PROJECTIONS[0], name="orders_latest_row", kind=LatestState(deletes=frozenset({"OrderCancelled"}))
)
EVERY_KIND = (*PROJECTIONS, orders_latest_row, order_trail)


def arrivals(events: list[OutboxEvent]) -> list[list[OutboxEvent]]:
    """The events as two deliveries: newest first, dealt round-robin into two, the second with some of both again
    (copies of events of the first delivery and of its own).

    Each order's events are consecutive seqs, so dealing them out puts an order's newer events in earlier
    deliveries than its older ones. (A third delivery with the copies alone cost a quarter of this module's Spark
    batches and reached no case these two do not.)"""
    newest_first = sorted(events, key=lambda e: -e.seq)
    return [newest_first[0::2], newest_first[1::2] + events[::4]]


@pytest.fixture(scope="module")
def tables(
    projection_spark: Any, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[list[str], list[str]]]]:
    """Per projection: its rows from the events in seq order in one batch, and from `arrivals` batch by batch."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created: list[str] = []

    def new_topic(prefix: str = "t", partitions: int = 2) -> str:
        topic = f"{prefix}.{uuid.uuid4().hex[:10]}"
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
        created.append(topic)
        return topic

    harness = Harness(projection_spark, kafka_bootstrap, Path(tmp_path_factory.mktemp("arrival")), new_topic)
    events = [
        dataclasses.replace(e, occurred_at=BASE_TIME + timedelta(seconds=13 * e.seq)) for e in order_lifecycle(8)
    ]
    in_order, in_seq_order = harness.lake("in_order"), harness.topic(events)
    shuffled, out_of_order = harness.lake("shuffled"), harness.topic([])
    first, *later = arrivals(events)
    # The in-order build beside the first delivery's batch: separate topics, lakes and checkpoints.
    produce(kafka_bootstrap, out_of_order, first)
    harness.run_together([(EVERY_KIND, in_seq_order, in_order), (EVERY_KIND, out_of_order, shuffled)])
    for delivery in later:
        produce(kafka_bootstrap, out_of_order, delivery)
        harness.run(EVERY_KIND, out_of_order, shuffled)

    yield {p.name: (harness.rows(p, in_order), harness.rows(p, shuffled)) for p in EVERY_KIND}
    for future in admin.delete_topics(created).values():
        future.result(30)


@pytest.mark.parametrize("projection", EVERY_KIND, ids=lambda p: f"{p.kind.name}-{p.name}")
def test_a_kinds_table_does_not_depend_on_batching_or_arrival_order(
    projection: Projection, tables: dict[str, tuple[list[str], list[str]]]
) -> None:
    in_order, shuffled = tables[projection.name]
    assert in_order, f"{projection.name} is empty"
    assert shuffled == in_order


def test_the_arrivals_are_really_out_of_order() -> None:
    # So that the comparison above tests order: most orders get an event in a later delivery than a newer one.
    events = order_lifecycle(8)
    late_orders = {
        e.aggregate_id
        for i, delivery in enumerate(arrivals(events))
        for e in delivery
        if any(o.aggregate_id == e.aggregate_id and o.seq > e.seq for earlier in arrivals(events)[:i] for o in earlier)
    }
    assert len(late_orders) >= 6
