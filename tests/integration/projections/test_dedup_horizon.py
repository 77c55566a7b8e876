"""The deduplication horizon: inside it a duplicate is dropped; behind it state is pruned and events refused."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from projections import DedupHorizon, EventLog, Projection, WindowedCounts
from projections.applier import BatchApplier
from projections.examples import ORDER_EVENTS
from projections.lake import Lake
from projections.metrics import ProjectionMetrics
from projections.progress import read_progress
from projections.runner import prepare
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import BASE_TIME, OutboxEvent, as_micro_batch

pytestmark = pytest.mark.integration

PER_BATCH = 3


def paid(seq: int, minute: int, event_id: str | None = None) -> OutboxEvent:
    order = f"order-{seq:05d}"
    return OutboxEvent(
        seq,
        order,
        "OrderPaid",
        {"order_id": order, "amount": 10},
        event_id=event_id or f"evt-{seq:05d}",
        occurred_at=BASE_TIME + timedelta(minutes=minute, seconds=seq % 50),
    )


def applier(
    harness: Harness, projection: Projection, lake: Lake, metrics: ProjectionMetrics | None = None
) -> BatchApplier:
    return BatchApplier(projection, prepare(harness.spark, projection, lake), lake, app_id="horizon", metrics=metrics)


def test_windowed_counts_keep_a_bounded_staging_set_and_refuse_events_in_closed_windows(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    projection = Projection(
        name="paid_per_minute",
        kind=WindowedCounts(window="1 minute", horizon=DedupHorizon(time=timedelta(minutes=10), prune_every=3)),
        event_types=ORDER_EVENTS,
        aggregate_types=("order",),
    )
    lake = harness.lake("lake")
    metrics = ProjectionMetrics()
    counts = applier(harness, projection, lake, metrics)
    staging = lake.staging(projection.name)

    # Batch b holds three events in minute 5b: the stream's time moves 5 minutes a batch.
    sent: list[list[OutboxEvent]] = []
    staged_sizes = []
    for b in range(12):
        sent.append([paid(PER_BATCH * b + i + 1, 5 * b) for i in range(PER_BATCH)])
        counts.apply(as_micro_batch(harness.spark, sent[-1]), b)
        staged_sizes.append(harness.spark.read.format("delta").load(staging).count())

    # A window closes 10 minutes behind what was applied before the batch; closed windows are pruned every
    # third batch. So the staging set never holds more than six batches' windows, while the stream went on
    # for twelve; after the last prune (batch 9) it starts at batch 6's window.
    assert max(staged_sizes) <= 6 * PER_BATCH < 12 * PER_BATCH
    windows = harness.spark.read.format("delta").load(staging).select("window_start").distinct().collect()
    assert min(r[0] for r in windows) == (BASE_TIME + timedelta(minutes=5 * 6)).replace(tzinfo=None)

    def counts_of(*minutes: int) -> list[int]:
        """The count of each minute's window, from one read of the table."""
        table = harness.spark.read.format("delta").load(lake.table(projection.name)).collect()
        starts = [(BASE_TIME + timedelta(minutes=minute)).replace(tzinfo=None) for minute in minutes]
        return [int(sum(r["count"] for r in table if r["window_start"] == start)) for start in starts]

    assert counts_of(*[5 * b for b in range(12)]) == [PER_BATCH] * 12

    # Inside the horizon: a duplicate of the last batch's event changes nothing.
    counts.apply(as_micro_batch(harness.spark, [sent[11][0], paid(100, 56)]), 12)
    assert counts_of(55, 56) == [PER_BATCH, 1]

    # Behind it: a duplicate from the first window and a never-seen event in a closed window are both
    # refused, logged and counted in the progress record and on /metrics; the closed windows keep their counts.
    with caplog.at_level(logging.WARNING, logger="projections.applier"):
        counts.apply(as_micro_batch(harness.spark, [sent[0][0], paid(101, 5, "evt-late"), paid(102, 57)]), 13)
    assert counts_of(0, 5, 57) == [PER_BATCH, PER_BATCH, 1]
    progress = read_progress(lake, projection.name)
    assert progress is not None and progress.events_beyond_horizon == 2
    assert progress.last_batch["beyond_horizon"] == 2
    labels = {"projection": projection.name}
    assert metrics.registry.get_sample_value("projection_events_beyond_horizon_total", labels) == 2
    refusals = [r for r in caplog.records if "deduplication horizon" in r.getMessage()]
    assert len(refusals) == 1 and getattr(refusals[0], "count", None) == 2


def test_windowed_counts_refuse_a_horizon_by_seq() -> None:
    from projections.errors import DeclarationError

    with pytest.raises(DeclarationError, match="must be a time"):
        Projection(
            name="by_seq",
            kind=WindowedCounts(horizon=DedupHorizon(seqs=1000)),
            event_types=ORDER_EVENTS,
            aggregate_types=("order",),
        )


def test_event_log_drops_a_duplicate_inside_the_horizon_and_refuses_one_behind_it(harness: Harness) -> None:
    projection = Projection(
        name="paid_log",
        kind=EventLog(horizon=DedupHorizon(seqs=10)),
        event_types=ORDER_EVENTS,
        aggregate_types=("order",),
    )
    lake = harness.lake("lake")
    log = applier(harness, projection, lake)

    def logged() -> list[str]:
        table = harness.spark.read.format("delta").load(lake.table(projection.name))
        return sorted(r["event_id"] for r in table.collect())

    log.apply(as_micro_batch(harness.spark, [paid(s, 0) for s in range(1, 6)]), 0)
    # The floor is the highest seq applied so far, 5, less 10: seq 5 is inside, so dropped as a duplicate;
    # the batch's own seqs all pass, however far they reach.
    log.apply(as_micro_batch(harness.spark, [paid(s, 1) for s in range(6, 16)] + [paid(5, 0)]), 1)
    assert logged() == [f"evt-{s:05d}" for s in range(1, 16)]

    # The floor is now 15 - 10 = 5: seq 3 again, and a never-seen seq 2, are refused rather than appended.
    log.apply(
        as_micro_batch(harness.spark, [paid(s, 2) for s in range(16, 31)] + [paid(3, 0), paid(2, 0, "evt-late")]),
        2,
    )
    assert logged() == [f"evt-{s:05d}" for s in range(1, 31)]
    progress = read_progress(lake, projection.name)
    assert progress is not None
    assert (progress.events_beyond_horizon, progress.last_batch["applied"]) == (2, 15)
