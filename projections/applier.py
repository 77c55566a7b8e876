"""The foreachBatch function: decode a micro-batch, set bad records aside, apply the rest, record progress.

Every Delta write of a batch carries the projection's app id and the batch id (`Txn`), so when Spark runs
a batch again after a failure, the writes that already landed are skipped and the others are made.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from projections.declaration import Projection, ResolvedPayload
from projections.envelope import ENVELOPE, ERROR, RELEVANT, decode
from projections.kinds.base import Batch
from projections.lake import Lake
from projections.progress import BatchStats, Progress, read_progress, write_progress
from projections.quarantine import set_aside
from projections.txn import Txn

if TYPE_CHECKING:
    from projections.metrics import ProjectionMetrics

log = logging.getLogger(__name__)

_EVENT_COLUMNS = [
    c for c in ENVELOPE if c not in ("value", "seq_text", "occurred_at_text", "kafka_timestamp")
]


class BatchApplier:
    """Applies micro-batches of one projection; pass it to `DataStreamWriter.foreachBatch`."""

    def __init__(
        self,
        projection: Projection,
        payload: ResolvedPayload,
        lake: Lake,
        app_id: str,
        metrics: ProjectionMetrics | None = None,
    ) -> None:
        self.projection = projection
        self.payload = payload
        self.lake = lake
        self.app_id = app_id
        self.metrics = metrics
        self._progress: Progress | None = None

    def __call__(self, raw: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        try:
            stats = self.apply(raw, batch_id)
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
                "max_seq": stats.max_seq,
                "seconds": round(elapsed, 3),
            },
        )

    def apply(self, raw: DataFrame, batch_id: int) -> BatchStats:
        """Apply one micro-batch and return what it held (callable directly, e.g. to retry a batch id)."""
        session = raw.sparkSession
        txn = Txn(self.app_id, batch_id)
        decoded = decode(raw, self.projection, self.payload).persist()
        try:
            stats = _stats(decoded)
            if stats.quarantined:
                bad = decoded.where(F.col(RELEVANT) & F.col(ERROR).isNotNull())
                _log_quarantined(self.projection.name, batch_id, bad, stats.quarantined)
                set_aside(session, self.lake.quarantine(self.projection.name), self.projection.name, bad, txn)
            if stats.applied:
                assert stats.min_seq is not None and stats.max_seq is not None
                events = decoded.where(F.col(RELEVANT) & F.col(ERROR).isNull()).select(
                    *_EVENT_COLUMNS, *self.payload.columns.fieldNames()
                )
                batch = Batch(
                    session=session,
                    batch_id=batch_id,
                    projection=self.projection,
                    payload=self.payload,
                    lake=self.lake,
                    txn=txn,
                    events=events,
                    seq_range=(stats.min_seq, stats.max_seq),
                )
                self.projection.kind.apply(batch)
            self._record(session, batch_id, stats)
            return stats
        finally:
            decoded.unpersist()

    def _record(self, session: Any, batch_id: int, stats: BatchStats) -> None:
        if self._progress is None:
            self._progress = read_progress(self.lake, self.projection.name, session) or Progress(
                projection=self.projection.name,
                kind=self.projection.kind.name,
                table=self.lake.table(self.projection.name),
            )
        self._progress = self._progress.advanced(batch_id, stats)
        write_progress(self.lake, self._progress, session)


def _stats(decoded: DataFrame) -> BatchStats:
    valid = F.col(RELEVANT) & F.col(ERROR).isNull()
    rows = (
        decoded.groupBy("topic", "partition")
        .agg(
            F.max("offset").alias("max_offset"),
            F.count(F.lit(1)).alias("rows"),
            F.count(F.when(valid, 1)).alias("applied"),
            F.count(F.when(F.col(RELEVANT) & F.col(ERROR).isNotNull(), 1)).alias("quarantined"),
            F.min(F.when(valid, F.col("seq"))).alias("min_seq"),
            F.max(F.when(valid, F.col("seq"))).alias("max_seq"),
            F.date_format(
                F.max(F.when(valid, F.col("occurred_at"))), "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
            ).alias("last_event_time"),
        )
        .collect()
    )
    offsets: dict[str, dict[str, int]] = {}
    for r in rows:
        offsets.setdefault(r["topic"], {})[str(r["partition"])] = int(r["max_offset"]) + 1
    total, applied, bad = (sum(int(r[c]) for r in rows) for c in ("rows", "applied", "quarantined"))
    seqs = [int(r["min_seq"]) for r in rows if r["min_seq"] is not None]
    tops = [int(r["max_seq"]) for r in rows if r["max_seq"] is not None]
    times = [str(r["last_event_time"]) for r in rows if r["last_event_time"] is not None]
    return BatchStats(
        next_offsets=offsets,
        rows=total,
        applied=applied,
        quarantined=bad,
        ignored=total - applied - bad,
        min_seq=min(seqs) if seqs else None,
        max_seq=max(tops) if tops else None,
        last_event_time=max(times) if times else None,
    )


def _log_quarantined(projection: str, batch_id: int, bad: DataFrame, count: int) -> None:
    sample = [
        {"topic": r["topic"], "partition": r["partition"], "offset": r["offset"], "error": r[ERROR]}
        for r in bad.select("topic", "partition", "offset", ERROR).limit(5).collect()
    ]
    log.warning(
        "events quarantined",
        extra={"projection": projection, "batch_id": batch_id, "count": count, "sample": sample},
    )


def _interrupted(exc: BaseException) -> bool:
    # query.stop() interrupts the stream thread; the JVM error then reaches Python as text.
    text = str(exc)
    return "java.lang.InterruptedException" in text or "ClosedByInterruptException" in text
