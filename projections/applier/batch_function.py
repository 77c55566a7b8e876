"""The foreachBatch function: apply each micro-batch by the projection's apply path, record progress, log it.

Every Delta write of a batch carries the projection's app id and the batch id (`Txn`), so when Spark runs
a batch again after a failure, the writes that already landed are skipped and the others are made.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from projections.applier.paths import ApplyPath, TwoPass
from projections.applier.steps import Clock, Steps
from projections.declaration import Projection
from projections.history import HistoryStart
from projections.lake import Lake
from projections.payload import ResolvedPayload
from projections.progress import BatchStats, Progress, read_progress, write_progress

if TYPE_CHECKING:
    from projections.metrics import ProjectionMetrics

# The applier's one logger, whichever of its modules logs: the name its log lines carry and operators filter on.
log = logging.getLogger("projections.applier")


class BatchApplier:
    """Applies micro-batches of one projection; pass it to `DataStreamWriter.foreachBatch`."""

    def __init__(
        self,
        projection: Projection,
        payload: ResolvedPayload,
        lake: Lake,
        app_id: str,
        metrics: ProjectionMetrics | None = None,
        path: ApplyPath | None = None,
        history: HistoryStart | None = None,
    ) -> None:
        self.projection = projection
        self.payload = payload
        self.lake = lake
        self.app_id = app_id
        self.metrics = metrics
        #: How every batch is applied, chosen once: a streaming query's (`streaming_path`), or the two-pass path,
        #: which takes batches as Kafka hands them over (a batch applied by hand, to retry a batch id).
        self.path = path or TwoPass()
        self.steps = Steps(projection, payload, lake, app_id)
        #: Where the history of a table built from scratch starts: noted in the progress record it creates.
        self.history = history
        self._progress: Progress | None = None
        #: Seconds each step of the last batch took (`apply`), for the "batch applied" log line and profiles.
        self.phases: dict[str, float] = {}

    def source(self, stream: DataFrame) -> DataFrame:
        """What the query should hand to this applier (`ApplyPath.source`)."""
        return self.path.source(stream, self.projection, self.payload)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        try:
            stats = self.apply(batch, batch_id)
        except Exception as exc:
            if _interrupted(exc):
                log.info(
                    "batch interrupted by a stop; it runs again on restart",
                    extra={"projection": self.projection.name, "batch_id": batch_id},
                )
                raise
            if self.metrics is not None:
                self.metrics.batch_failed(self.projection.name)
            log.exception("batch failed", extra={"projection": self.projection.name, "batch_id": batch_id})
            raise
        elapsed = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.batch_applied(self.projection.name, quarantined=stats.quarantined)
        log.info(
            "batch applied",
            extra={
                "projection": self.projection.name,
                "batch_id": batch_id,
                "rows": stats.rows,
                "applied": stats.applied,
                "quarantined": stats.quarantined,
                "ignored": stats.ignored,
                "beyond_horizon": stats.beyond_horizon,
                "max_seq": stats.max_seq,
                "seconds": round(elapsed, 3),
                "phases": self.phases,
            },
        )

    def apply(self, batch: DataFrame, batch_id: int) -> BatchStats:
        """Apply one micro-batch, as `source` hands it over, and return what it held (callable directly, e.g. to
        retry a batch id)."""
        session = batch.sparkSession
        recorded = self._recorded(session)
        self.phases = {}
        clock = Clock(self.phases)
        stats = self.path.apply(self.steps, batch, batch_id, recorded, clock)
        self.record(session, batch_id, stats)
        clock.lap("progress_record")
        return stats

    def _recorded(self, session: Any) -> Progress:
        if self._progress is None:
            self._progress = read_progress(self.lake, self.projection.name, session) or Progress(
                projection=self.projection.name,
                kind=self.projection.kind.name,
                table=self.lake.table(self.projection.name),
                history=None if self.history is None else self.history.as_record(),
            )
        return self._progress

    def record(self, session: Any, batch_id: int, stats: BatchStats) -> None:
        """Advance the progress record by the batch's stats and count its refused events in the metrics."""
        before = self._recorded(session)
        self._progress = before.advanced(batch_id, stats)
        write_progress(self.lake, self._progress, session)
        if self.metrics is not None:
            # What the record added, so a batch Spark runs again after a failure is counted once here too.
            refused = self._progress.events_beyond_horizon - before.events_beyond_horizon
            self.metrics.refused_beyond_horizon(self.projection.name, refused)


def _interrupted(exc: BaseException) -> bool:
    # query.stop() interrupts the stream thread; the JVM error then reaches Python as text.
    text = str(exc)
    return "java.lang.InterruptedException" in text or "ClosedByInterruptException" in text
