"""Delta txnAppId/txnVersion: a batch applied twice with the same id changes each table once; a reset rotates the id."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import StructType

from projections.applier import BatchApplier
from projections.declaration import Projection
from projections.examples import order_events, orders_current
from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import ensure_table
from projections.lake import delete_path, write_text
from projections.payload import ResolvedPayload
from projections.runner import prepare
from projections.txn import APP_ID_FILE, checkpoint_app_id
from tests.integration.projections.conftest import Harness, on_topic
from tests.integration.projections.events import order_lifecycle, produce


@dataclass(frozen=True)
class AppendEvents(Kind):
    """Not idempotent by itself: appends every event it is given. Only the Txn keeps a retry from doubling."""

    name = "append_events"

    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        return StructType.fromDDL("event_id STRING, seq BIGINT")

    def apply(self, batch: Batch) -> int:
        frame = batch.events.select("event_id", "seq")
        frame.write.format("delta").mode("append").options(**batch.txn.writer_options()).save(batch.table)
        return 0


appended = Projection(
    name="appended", kind=AppendEvents(), event_types=orders_current.event_types, topics=("x",)
)


def table_version(harness: Harness, path: str) -> int:
    return int(harness.spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["version"])


def test_same_batch_id_twice_changes_each_table_once(harness: Harness) -> None:
    events = order_lifecycle(6)
    topic = harness.topic(events)
    lake = harness.lake("lake")
    raw = harness.kafka_batch(topic)
    appliers = {}
    for projection in (on_topic(orders_current, topic), on_topic(order_events, topic), appended):
        payload = prepare(harness.spark, projection, lake)
        ensure_table(
            harness.spark, lake.table(projection.name), projection.kind.table_schema(projection, payload), ""
        )
        appliers[projection.name] = BatchApplier(projection, payload, lake, app_id="test-app")

    for applier in appliers.values():
        applier.apply(raw, 7)
    versions = {name: table_version(harness, lake.table(name)) for name in appliers}
    rows = {name: harness.rows(a.projection, lake) for name, a in appliers.items()}
    assert len(rows["appended"]) == len(events)

    for applier in appliers.values():  # Spark retrying batch 7
        applier.apply(raw, 7)
    assert {name: table_version(harness, lake.table(name)) for name in appliers} == versions
    assert {name: harness.rows(a.projection, lake) for name, a in appliers.items()} == rows

    # The same records under a new batch id are written: only the Txn stopped the append from doubling.
    appliers["appended"].apply(raw, 8)
    assert len(harness.rows(appended, lake)) == 2 * len(events)


def test_reset_checkpoint_gets_a_new_app_id_so_batch_zero_applies_again(harness: Harness) -> None:
    first = order_lifecycle(4)
    topic = harness.topic(first)
    lake = harness.lake("lake")
    checkpoint = lake.checkpoint(order_events.name)
    harness.run([order_events], topic, lake)
    old_app_id = checkpoint_app_id(checkpoint, order_events.name)
    assert checkpoint_app_id(checkpoint, order_events.name) == old_app_id  # stable while the checkpoint lives

    later = order_lifecycle(6, start_seq=100)[-5:]
    produce(harness.bootstrap, topic, later)
    delete_path(checkpoint)  # what `outbox-projections replay` does
    harness.run([order_events], topic, lake)
    assert checkpoint_app_id(checkpoint, order_events.name) != old_app_id
    assert len(harness.rows(order_events, lake)) == len(first) + len(later)

    # The failure rotation prevents: a fresh checkpoint that kept the old app id skips its batch 0 entirely.
    stale = harness.lake("stale")
    harness.run([order_events], topic, stale)
    stale_checkpoint = stale.checkpoint(order_events.name)
    stale_app_id = checkpoint_app_id(stale_checkpoint, order_events.name)
    more = order_lifecycle(8, start_seq=200)[-3:]
    produce(harness.bootstrap, topic, more)
    delete_path(stale_checkpoint)
    write_text(f"{stale_checkpoint}/{APP_ID_FILE}", stale_app_id)
    harness.run([order_events], topic, stale)
    table = harness.spark.read.format("delta").load(stale.table(order_events.name))
    assert table.where(f"seq >= {more[0].seq}").count() == 0
