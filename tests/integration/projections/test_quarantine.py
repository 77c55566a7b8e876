"""Bad events go to the quarantine table with their error and Kafka coordinates; the rest of the batch applies."""

from __future__ import annotations

import json
from pathlib import Path

from projections import runner
from projections.examples import order_events, orders_current
from projections.metrics import ProjectionMetrics
from tests.integration.projections.conftest import Harness, on_topic
from tests.integration.projections.events import OutboxEvent, order_lifecycle, produce


def test_malformed_events_are_quarantined_and_the_rest_applied(harness: Harness) -> None:
    good = order_lifecycle(4)
    bad = [
        OutboxEvent(101, "order-x1", "OrderPlaced", "{not json"),
        OutboxEvent(102, "order-x2", "OrderPaid", {"order_id": "order-x2", "amount": "a lot"}),
        OutboxEvent(
            103, "order-x3", "OrderShipped", {"carrier": "dhl"}
        ),  # no order_id (NOT NULL, and the key)
        OutboxEvent(
            104,
            "order-x4",
            "OrderPaid",
            {"order_id": "order-x4", "amount": 1},
            header_overrides={"seq": None},
        ),
        OutboxEvent(
            105,
            "order-x5",
            "OrderPaid",
            {"order_id": "order-x5", "amount": 1},
            header_overrides={"seq": "5x"},
        ),
    ]
    ignored = [OutboxEvent(106, "order-0", "OrderRefunded", {"order_id": "order-000"})]  # not handled here
    topic = harness.new_topic("proj", partitions=2)
    # Bad records in the middle of the good ones: one batch holds them all.
    produce(harness.bootstrap, topic, [*good[:5], *bad, *ignored, *good[5:]])
    lake = harness.lake("lake")
    metrics = ProjectionMetrics()
    settings = harness.settings(lake)
    queries = [
        runner.start(harness.spark, on_topic(p, topic), settings, metrics)
        for p in (orders_current, order_events)
    ]
    for query in queries:
        query.awaitTermination()

    log = harness.spark.read.format("delta").load(lake.table(order_events.name))
    assert sorted(r["seq"] for r in log.collect()) == [e.seq for e in good]
    current = harness.spark.read.format("delta").load(lake.table(orders_current.name))
    assert {r["order_id"] for r in current.collect()} == {e.aggregate_id for e in good}

    quarantine = harness.spark.read.format("delta").load(lake.quarantine(orders_current.name))
    errors = {r["aggregate_id"]: r for r in quarantine.collect()}
    assert set(errors) == {e.aggregate_id for e in bad}
    assert errors["order-x1"]["error"] == "payload of OrderPlaced is not a JSON object"
    assert errors["order-x2"]["error"].startswith("payload of OrderPaid does not fit its schema")
    assert errors["order-x3"]["error"] == "payload of OrderShipped lacks required field(s): order_id"
    assert errors["order-x4"]["error"] == "missing header seq"
    assert errors["order-x5"]["error"] == "header seq is not a decimal integer: 5x"
    for row in errors.values():
        assert row["topic"] == topic and row["partition"] in (0, 1) and row["offset"] >= 0
        assert row["projection"] == orders_current.name and row["value"] is not None
    first = errors["order-x1"]
    assert bytes(first["value"]) == b"{not json" and first["event_type"] == "OrderPlaced"

    progress = json.loads(Path(lake.progress(orders_current.name)).read_text())
    assert progress["last_batch"] == {"rows": 10 + 1 + 5, "applied": 10, "quarantined": 5, "ignored": 1,
                                      "beyond_horizon": 0}
    assert progress["max_seq"] == max(e.seq for e in good)
    sample = metrics.registry.get_sample_value
    assert sample("projection_quarantined_events_total", {"projection": orders_current.name}) == 5
    assert sample("projection_batches_total", {"projection": order_events.name}) == 1
