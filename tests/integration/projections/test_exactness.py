"""fold and windowed_counts are exact under duplicates, replays from earliest and a rewinding bridge."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import timedelta
from typing import Any

from projections.examples import ORDER_STATUS, order_events_per_minute, order_status_fold
from projections.lake import delete_path
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import BASE_TIME, OutboxEvent, order_lifecycle, produce

PROJECTIONS = (order_status_fold, order_events_per_minute)


def spread(events: list[OutboxEvent]) -> list[OutboxEvent]:
    """The events 13 s apart, so they fall into several one-minute windows."""
    return [dataclasses.replace(e, occurred_at=BASE_TIME + timedelta(seconds=13 * e.seq)) for e in events]


def expected_counts(events: list[OutboxEvent]) -> dict[tuple[str, str], int]:
    distinct = {e.event_id: e for e in events}.values()
    counts: Counter[tuple[str, str]] = Counter()
    for e in distinct:
        assert e.occurred_at is not None
        minute = e.occurred_at.replace(second=0, microsecond=0)
        counts[(minute.strftime("%H:%M"), e.event_type)] += 1
    return dict(counts)


def expected_status(events: list[OutboxEvent]) -> dict[str, tuple[str, int]]:
    by_order: dict[str, dict[str, OutboxEvent]] = {}
    for e in events:
        by_order.setdefault(e.aggregate_id, {})[e.event_id] = e
    return {
        order: (ORDER_STATUS[max(evs.values(), key=lambda e: e.seq).event_type], len(evs))
        for order, evs in by_order.items()
    }


def counts(harness: Harness, lake: Any) -> dict[tuple[str, str], int]:
    table = harness.spark.read.format("delta").load(lake.table(order_events_per_minute.name))
    return {(r["window_start"].strftime("%H:%M"), r["event_type"]): r["count"] for r in table.collect()}


def status(harness: Harness, lake: Any) -> dict[str, tuple[str, int]]:
    table = harness.spark.read.format("delta").load(lake.table(order_status_fold.name))
    return {r["order_id"]: (r["status"], r["events"]) for r in table.collect()}


def test_fold_and_windowed_counts_are_exact_under_duplicates_and_replays(harness: Harness) -> None:
    events = spread(order_lifecycle(10))
    topic = harness.topic(events, copies=2)  # every event twice, as after a bridge rewind
    lake = harness.lake("lake")
    harness.run(PROJECTIONS, topic, lake)  # each event twice in one batch
    assert counts(harness, lake) == expected_counts(events)
    assert status(harness, lake) == expected_status(events)

    # Replay from earliest with new checkpoints: everything arrives a third and fourth time, in a later batch.
    for projection in PROJECTIONS:
        delete_path(lake.checkpoint(projection.name))
    harness.run(PROJECTIONS, topic, lake)
    assert counts(harness, lake) == expected_counts(events)
    assert status(harness, lake) == expected_status(events)

    # The bridge rewinds: the second half again, then new events, some of them in already counted windows.
    newer = spread(order_lifecycle(14, start_seq=1)[len(events) :])
    produce(harness.bootstrap, topic, [*events[len(events) // 2 :], *newer])
    harness.run(PROJECTIONS, topic, lake)
    assert counts(harness, lake) == expected_counts(events + newer)
    assert status(harness, lake) == expected_status(events + newer)
