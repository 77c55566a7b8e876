"""Upkeep: OPTIMIZE compacts the small files of many micro-batches, expired tombstones are purged, readers skip them."""

from __future__ import annotations

from projections.examples import orders_current
from projections.maintenance import maintain
from projections.readers import live_rows, register_views
from tests.integration.projections.conftest import Harness, on_topic
from tests.integration.projections.events import order_lifecycle


def test_maintain_compacts_purges_expired_tombstones_and_keeps_live_rows(harness: Harness) -> None:
    events = order_lifecycle(5)  # order-004 is cancelled: a tombstone from 2024, long past the 7-day retention
    topic = harness.topic(events)
    lake = harness.lake("lake")
    projection = on_topic(orders_current, topic)
    harness.run([projection], topic, lake, max_offsets_per_trigger=7)  # two batches, several small files

    table = harness.spark.read.format("delta").load(lake.table(projection.name))
    assert table.where("is_deleted").count() == 1
    live_before = sorted(r["order_id"] for r in live_rows(harness.spark, projection, lake).collect())
    assert "order-004" not in live_before and len(live_before) == 4
    assert register_views(harness.spark, [projection], lake) == ["orders_current"]
    assert harness.spark.sql("SELECT count(*) AS n FROM orders_current").first()["n"] == 4

    report = maintain(harness.spark, projection, lake)
    done = report["tables"][lake.table(projection.name)]
    assert done["tombstones_purged"] == 1
    assert done["files_removed"] > 1 and done["files_added"] == 1
    table = harness.spark.read.format("delta").load(lake.table(projection.name))
    assert table.where("is_deleted").count() == 0
    assert sorted(r["order_id"] for r in live_rows(harness.spark, projection, lake).collect()) == live_before
