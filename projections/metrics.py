"""Every Prometheus metric the projections expose from the Spark driver, named in one place.

Alert rules and dashboards may only use names from `METRIC_NAMES` (a test checks them). Code reaches
metrics through `ProjectionMetrics`, which builds them in its own registry. `ProgressListener` turns
Spark's streaming progress into batch duration, row rates and lag; the batch applier counts batches,
failures, quarantined events and events refused beyond the deduplication horizon itself.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger(__name__)

BATCH_DURATION_SECONDS: Final = "projection_batch_duration_seconds"
INPUT_ROWS_PER_SECOND: Final = "projection_input_rows_per_second"
PROCESSED_ROWS_PER_SECOND: Final = "projection_processed_rows_per_second"
LAG_OFFSETS: Final = "projection_lag_offsets"
BATCHES: Final = "projection_batches_total"
FAILED_BATCHES: Final = "projection_failed_batches_total"
QUARANTINED_EVENTS: Final = "projection_quarantined_events_total"
EVENTS_BEYOND_HORIZON: Final = "projection_events_beyond_horizon_total"
LAST_BATCH_TIMESTAMP_SECONDS: Final = "projection_last_batch_timestamp_seconds"

METRIC_NAMES: Final = (
    BATCH_DURATION_SECONDS,
    INPUT_ROWS_PER_SECOND,
    PROCESSED_ROWS_PER_SECOND,
    LAG_OFFSETS,
    BATCHES,
    FAILED_BATCHES,
    QUARANTINED_EVENTS,
    EVENTS_BEYOND_HORIZON,
    LAST_BATCH_TIMESTAMP_SECONDS,
)

_HISTOGRAMS: Final = frozenset({BATCH_DURATION_SECONDS})

# Exposed series a PromQL expression may name: a histogram also exposes _bucket, _sum and _count.
SERIES_NAMES: Final = frozenset(METRIC_NAMES) | frozenset(
    f"{name}{suffix}" for name in _HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")
)

# From a small local batch (50 ms) to a slow MERGE over a large table (10 min).
BATCH_DURATION_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def _strip_total(name: str) -> str:
    # prometheus_client appends _total to counters itself.
    return name.removesuffix("_total")


class ProjectionMetrics:
    """The projection metrics in their own registry, every series labelled by projection."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ["projection"]
        self.batch_duration = Histogram(
            BATCH_DURATION_SECONDS,
            "Duration of a micro-batch, as Spark reports it (read, apply, commit)",
            labels,
            buckets=BATCH_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.input_rows_per_second = Gauge(
            INPUT_ROWS_PER_SECOND,
            "Rows per second arriving from Kafka in the last batch",
            labels,
            registry=self.registry,
        )
        self.processed_rows_per_second = Gauge(
            PROCESSED_ROWS_PER_SECOND,
            "Rows per second processed in the last batch",
            labels,
            registry=self.registry,
        )
        self.lag_offsets = Gauge(
            LAG_OFFSETS,
            "Offsets between the end of the topics and what the projection has read",
            labels,
            registry=self.registry,
        )
        self.batches = Counter(_strip_total(BATCHES), "Micro-batches applied", labels, registry=self.registry)
        self.failed_batches = Counter(
            _strip_total(FAILED_BATCHES), "Micro-batches that raised an error", labels, registry=self.registry
        )
        self.quarantined_events = Counter(
            _strip_total(QUARANTINED_EVENTS),
            "Events set aside in the quarantine table",
            labels,
            registry=self.registry,
        )
        self.events_beyond_horizon = Counter(
            _strip_total(EVENTS_BEYOND_HORIZON),
            "Events refused, not applied, for being behind the deduplication horizon",
            labels,
            registry=self.registry,
        )
        self.last_batch_timestamp = Gauge(
            LAST_BATCH_TIMESTAMP_SECONDS,
            "Unix time of the last applied micro-batch",
            labels,
            registry=self.registry,
        )

    def register(self, projection: str, deduplicates: bool = False) -> None:
        """Create the projection's series at zero, so alerts see them before the first batch; the count of
        events beyond the horizon only for a kind with a deduplication horizon (no other refuses any)."""
        for metric in (self.batches, self.failed_batches, self.quarantined_events):
            metric.labels(projection)
        if deduplicates:
            self.events_beyond_horizon.labels(projection)

    def batch_applied(self, projection: str, quarantined: int) -> None:
        self.batches.labels(projection).inc()
        if quarantined:
            self.quarantined_events.labels(projection).inc(quarantined)
        self.last_batch_timestamp.labels(projection).set_to_current_time()

    def refused_beyond_horizon(self, projection: str, count: int) -> None:
        if count:
            self.events_beyond_horizon.labels(projection).inc(count)

    def batch_failed(self, projection: str) -> None:
        self.failed_batches.labels(projection).inc()

    def progress(
        self,
        projection: str,
        duration_s: float | None,
        input_rate: float,
        processed_rate: float,
        lag: int | None,
    ) -> None:
        """Record one streaming progress report (duration only for reports of a batch that ran)."""
        if duration_s is not None:
            self.batch_duration.labels(projection).observe(duration_s)
        self.input_rows_per_second.labels(projection).set(input_rate)
        self.processed_rows_per_second.labels(projection).set(processed_rate)
        if lag is not None:
            self.lag_offsets.labels(projection).set(lag)


def kafka_lag(end_offset: str | None, latest_offset: str | None) -> int | None:
    """Offsets behind: the sum over partitions of (latest - end) from a Kafka source's progress JSON."""
    if not end_offset or not latest_offset:
        return None
    try:
        end: dict[str, dict[str, int]] = json.loads(end_offset)
        latest: dict[str, dict[str, int]] = json.loads(latest_offset)
    except (TypeError, ValueError):
        return None
    lag = 0
    for topic, partitions in latest.items():
        for partition, offset in partitions.items():
            lag += max(0, int(offset) - int(end.get(topic, {}).get(partition, 0)))
    return lag


class ProgressListener(StreamingQueryListener):
    """Feeds `ProjectionMetrics` from the progress of streaming queries named after projections."""

    def __init__(self, metrics: ProjectionMetrics, projections: set[str]) -> None:
        self.metrics = metrics
        self.projections = projections
        self._last_batch: dict[str, int] = {}

    def onQueryStarted(self, event: Any) -> None:
        return

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        name = progress.name
        if name not in self.projections:
            return
        # An idle trigger reports the last batch id again; count each batch's duration once.
        ran = self._last_batch.get(name) != progress.batchId and progress.numInputRows > 0
        self._last_batch[name] = progress.batchId
        lags = [kafka_lag(s.endOffset, s.latestOffset) for s in progress.sources]
        known = [lag for lag in lags if lag is not None]
        self.metrics.progress(
            name,
            duration_s=progress.batchDuration / 1000.0 if ran else None,
            input_rate=float(progress.inputRowsPerSecond or 0.0),
            processed_rate=float(progress.processedRowsPerSecond or 0.0),
            lag=sum(known) if known else None,
        )

    def onQueryIdle(self, event: Any) -> None:
        return

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error(
                "streaming query terminated with an error",
                extra={"query": str(event.id), "error": event.exception},
            )
