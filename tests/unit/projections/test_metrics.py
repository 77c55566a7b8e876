"""Projection metrics: the agreed names, and Spark progress turned into duration, rates and lag."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.types import StructType

from projections.applier import BatchApplier
from projections.examples import order_events, orders_current
from projections.lake import Lake
from projections.metrics import METRIC_NAMES, ProgressListener, ProjectionMetrics, kafka_lag
from projections.payload import ResolvedPayload
from projections.progress import BatchStats, read_progress

pytestmark = pytest.mark.unit


def test_metric_names_are_exactly_the_agreed_ones() -> None:
    assert METRIC_NAMES == (
        "projection_batch_duration_seconds",
        "projection_input_rows_per_second",
        "projection_processed_rows_per_second",
        "projection_lag_offsets",
        "projection_batches_total",
        "projection_failed_batches_total",
        "projection_quarantined_events_total",
        "projection_events_beyond_horizon_total",
        "projection_last_batch_timestamp_seconds",
    )
    exposed = {
        m.name + ("_total" if m.type == "counter" else "") for m in ProjectionMetrics().registry.collect()
    }
    assert exposed == set(METRIC_NAMES)


def test_lag_is_the_sum_over_partitions_of_latest_minus_end() -> None:
    end = json.dumps({"t": {"0": 10, "1": 5}})
    latest = json.dumps({"t": {"0": 15, "1": 5, "2": 3}})
    assert kafka_lag(end, latest) == 5 + 0 + 3
    assert kafka_lag(None, latest) is None
    assert kafka_lag(end, "not json") is None


def progress_event(name: str, batch_id: int, rows: int, lag: int = 0) -> Any:
    source = SimpleNamespace(
        endOffset=json.dumps({"t": {"0": 100}}), latestOffset=json.dumps({"t": {"0": 100 + lag}})
    )
    progress = SimpleNamespace(
        name=name,
        batchId=batch_id,
        numInputRows=rows,
        batchDuration=1500,
        inputRowsPerSecond=20.0,
        processedRowsPerSecond=40.0,
        sources=[source],
    )
    return SimpleNamespace(progress=progress)


def test_listener_records_each_batch_once_and_ignores_other_queries() -> None:
    metrics = ProjectionMetrics()
    listener = ProgressListener(metrics, {"orders_current"})
    listener.onQueryProgress(progress_event("orders_current", 0, rows=30, lag=7))
    listener.onQueryProgress(progress_event("orders_current", 0, rows=0, lag=0))  # idle report of batch 0
    listener.onQueryProgress(progress_event("someone_else", 3, rows=5))
    sample = metrics.registry.get_sample_value
    labels = {"projection": "orders_current"}
    assert sample("projection_batch_duration_seconds_count", labels) == 1
    assert sample("projection_batch_duration_seconds_sum", labels) == 1.5
    assert sample("projection_lag_offsets", labels) == 0
    assert sample("projection_processed_rows_per_second", labels) == 40.0
    assert sample("projection_batch_duration_seconds_count", {"projection": "someone_else"}) is None


def test_batch_counters() -> None:
    metrics = ProjectionMetrics()
    metrics.register("p")
    sample = metrics.registry.get_sample_value
    assert sample("projection_failed_batches_total", {"projection": "p"}) == 0
    metrics.batch_applied("p", quarantined=3)
    metrics.batch_applied("p", quarantined=0)
    metrics.batch_failed("p")
    assert sample("projection_batches_total", {"projection": "p"}) == 2
    assert sample("projection_quarantined_events_total", {"projection": "p"}) == 3
    assert sample("projection_failed_batches_total", {"projection": "p"}) == 1
    assert sample("projection_last_batch_timestamp_seconds", {"projection": "p"}) > 0


def test_events_beyond_the_horizon_are_counted_where_the_progress_record_counts_them(tmp_path: Path) -> None:
    metrics = ProjectionMetrics()
    metrics.register(order_events.name, deduplicates=True)
    metrics.register(orders_current.name)  # keeps no deduplication state, so refuses nothing: no such series
    lake = Lake(str(tmp_path))
    applier = BatchApplier(order_events, ResolvedPayload({}, StructType([])), lake, "app", metrics)

    def batch(beyond_horizon: int) -> BatchStats:
        return BatchStats(next_offsets={"t": {"0": 10}}, rows=5, applied=5 - beyond_horizon, quarantined=0,
                          ignored=0, min_seq=1, max_seq=5, last_event_time=None, beyond_horizon=beyond_horizon)

    def in_metrics(name: str) -> float | None:
        return metrics.registry.get_sample_value("projection_events_beyond_horizon_total", {"projection": name})

    def counted() -> tuple[float | None, int | None]:
        progress = read_progress(lake, order_events.name)
        return in_metrics(order_events.name), None if progress is None else progress.events_beyond_horizon

    assert counted() == (0, None)
    applier.record(None, 0, batch(beyond_horizon=2))
    assert counted() == (2, 2)
    applier.record(None, 0, batch(beyond_horizon=2))  # Spark runs batch 0 again after a failure
    assert counted() == (2, 2)
    applier.record(None, 1, batch(beyond_horizon=0))
    applier.record(None, 2, batch(beyond_horizon=3))
    assert counted() == (5, 5)
    assert in_metrics(orders_current.name) is None
