"""The foreachBatch function: decode a micro-batch, set bad records aside, apply the rest, record progress.

Every Delta write of a batch carries the projection's app id and the batch id (`Txn`), so when Spark runs
a batch again after a failure, the writes that already landed are skipped and the others are made.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from projections.declaration import Projection
from projections.envelope import ENVELOPE, ERROR, decode
from projections.history import HistoryStart
from projections.horizon import DedupHorizon, Floor
from projections.kind import Batch
from projections.kinds.base import highest_seq
from projections.lake import Lake
from projections.observed import BatchObservation, bad, batch_stats, count_batch, end_offsets, valid
from projections.payload import ResolvedPayload
from projections.progress import BatchStats, Progress, read_progress, write_progress
from projections.quarantine import set_aside
from projections.txn import Txn

if TYPE_CHECKING:
    from projections.metrics import ProjectionMetrics

log = logging.getLogger(__name__)

#: Appended to the app id of a batch's second write to the same table (`apply_from_guess`), so each has its own
#: `Txn`.
BELOW_GUESS_TXN = "/below-guess"
#: The top of a seq range that is open above (seqs are BIGINT).
_TOP_SEQ = 2**63 - 1

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
        observation: BatchObservation | None = None,
        checkpoint: str | None = None,
        history: HistoryStart | None = None,
    ) -> None:
        self.projection = projection
        self.payload = payload
        self.lake = lake
        self.app_id = app_id
        self.metrics = metrics
        #: With an observation, the query hands over decoded batches carrying it (`source`, `observed.py`): they
        #: are applied in one pass (`apply_observed`), and `checkpoint`'s offset log gives their end offsets.
        self.observation = observation
        self.checkpoint = checkpoint
        #: Where the history of a table built from scratch starts: noted in the progress record it creates.
        self.history = history
        self._progress: Progress | None = None
        #: Seconds each step of the last batch took (`apply`), for the "batch applied" log line and profiles.
        self.phases: dict[str, float] = {}

    def source(self, stream: DataFrame) -> DataFrame:
        """What the query should hand to this applier: the Kafka stream as it is, or, with an observation, the
        stream decoded with the observation on it (applied by `apply_observed`)."""
        if self.observation is None:
            return stream
        return self.observation.attach(decode(stream, self.projection, self.payload))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        try:
            if self.observation is not None and self.projection.kind.range_only_prunes:
                stats = self.apply_from_guess(batch, batch_id)
            elif self.observation is not None:
                stats = self.apply_observed(batch, batch_id)
            else:
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

    def apply(self, raw: DataFrame, batch_id: int) -> BatchStats:
        """Apply one micro-batch and return what it held (callable directly, e.g. to retry a batch id)."""
        session = raw.sparkSession
        txn = Txn(self.app_id, batch_id)
        self.phases = {}
        clock = _Clock(self.phases)
        decoded = decode(raw, self.projection, self.payload).persist()
        try:
            # Reading the batch from Kafka, decoding it into the cache and counting it: one Spark job.
            stats = count_batch(decoded)
            clock.lap("read_decode_stats")
            if stats.quarantined:
                self._quarantine(decoded, batch_id, stats.quarantined, txn)
                clock.lap("quarantine")
            if stats.applied:
                assert stats.min_seq is not None and stats.max_seq is not None
                events = self._events(decoded)
                seq_range: tuple[int, int] | None = (stats.min_seq, stats.max_seq)
                horizon = self.projection.kind.dedup_horizon()
                floor = None
                if horizon is not None:
                    floor = self._floor(session, horizon)
                    if not floor.passes(stats.min_seq, _time(stats.first_event_time)):
                        refused = self._refuse_beyond(events, horizon, floor, batch_id)
                        if refused:
                            events = events.where(~self.projection.kind.beyond_horizon(floor))
                            seq_range = _seq_range(events)
                        stats = dataclasses.replace(
                            stats, applied=stats.applied - refused, beyond_horizon=refused
                        )
                    clock.lap("horizon")
                if seq_range is not None:
                    refused = self.projection.kind.apply(self._batch(session, txn, events, seq_range))
                    clock.lap("kind_apply")
                    if refused:
                        stats = dataclasses.replace(
                            stats,
                            applied=stats.applied - refused,
                            beyond_horizon=stats.beyond_horizon + refused,
                        )
                if horizon is not None and floor is not None and horizon.prunes_after(batch_id):
                    self._prune(session, horizon, floor, batch_id)
                    clock.lap("prune")
            self.record(session, batch_id, stats)
            clock.lap("progress_record")
            return stats
        finally:
            decoded.unpersist()

    def apply_observed(self, decoded: DataFrame, batch_id: int) -> BatchStats:
        """Apply one decoded micro-batch carrying the query's observation, in one pass (see `observed.py`).

        The kind's MERGE is the first read of the batch and counts it as it goes; bad records are set aside
        after it, from the batch read again. Each write has its own `Txn`, so a batch Spark runs again after
        a failure between them writes only what is missing.
        """
        assert self.observation is not None
        session = decoded.sparkSession
        txn = Txn(self.app_id, batch_id)
        self.phases = {}
        clock = _Clock(self.phases)
        refused = self.projection.kind.apply(self._batch(session, txn, self._events(decoded), None))
        clock.lap("read_decode_apply")
        return self._finish(decoded, txn, self._observed(decoded, batch_id, clock), refused, clock)

    def apply_from_guess(self, decoded: DataFrame, batch_id: int) -> BatchStats:
        """Apply one decoded micro-batch carrying the query's observation, for a kind whose seq range only prunes.

        The range's low end is guessed before the batch is read: where the batch before began (the stream's
        partitions move forward together), or, with no batch recorded, above the table's highest seq (Delta
        answers that MAX from its files' statistics). The kind's MERGE of the events from there up is the first
        read of the batch, which the observation counts. Events below the guess (a replay, a lagging
        partition, a re-send) are MERGEd in a second pass, under a `Txn` of their own: both writes go to one
        table, and a shared one would make the second skip itself. The horizon's floor filters both; what it
        refused is counted afterwards, only when the batch's earliest event could be behind it.
        """
        assert self.observation is not None
        session = decoded.sparkSession
        kind = self.projection.kind
        txn = Txn(self.app_id, batch_id)
        self.phases = {}
        clock = _Clock(self.phases)
        low = self._guess_low(session)
        horizon = kind.dedup_horizon()
        floor = self._floor(session, horizon) if horizon is not None else None
        events = self._events(decoded)
        if floor is not None:
            events = events.where(~kind.beyond_horizon(floor))
        refused = kind.apply(self._batch(session, txn, events.where(F.col("seq") >= F.lit(low)), (low, _TOP_SEQ)))
        clock.lap("read_decode_merge")
        stats = self._observed(decoded, batch_id, clock)
        if floor is not None and stats.applied and not floor.passes(stats.min_seq, _time(stats.first_event_time)):
            assert horizon is not None
            refused += self._refuse_beyond(self._events(decoded), horizon, floor, batch_id)
            clock.lap("horizon")
        if stats.min_seq is not None and stats.min_seq < low:
            below = events.where(F.col("seq") < F.lit(low))
            refused += kind.apply(
                self._batch(session, Txn(self.app_id + BELOW_GUESS_TXN, batch_id), below, (stats.min_seq, low - 1))
            )
            clock.lap("merge_below_guess")
        if horizon is not None and floor is not None and horizon.prunes_after(batch_id):
            self._prune(session, horizon, floor, batch_id)
            clock.lap("prune")
        return self._finish(decoded, txn, stats, refused, clock)

    def _finish(self, decoded: DataFrame, txn: Txn, stats: BatchStats, refused: int, clock: _Clock) -> BatchStats:
        """The end of a one-pass batch: `refused` events out of the applied, the bad records set aside (the batch
        read again, after its counts were taken), the progress record."""
        if refused:
            stats = dataclasses.replace(stats, applied=stats.applied - refused, beyond_horizon=refused)
        if stats.quarantined:
            self._quarantine(decoded, txn.version, stats.quarantined, txn)
            clock.lap("quarantine")
        self.record(decoded.sparkSession, txn.version, stats)
        clock.lap("progress_record")
        return stats

    def _observed(self, decoded: DataFrame, batch_id: int, clock: _Clock) -> BatchStats:
        """What the batch's first write counted as it read the batch, with the offset log's end offsets. If it
        read nothing (Spark runs again a batch whose write had landed, and `Txn` skipped it; or the batch is
        empty), or the observation or offsets are not to be had, the batch is counted the old way."""
        assert self.observation is not None
        counted = self.observation.metrics(batch_id)
        offsets = None if self.checkpoint is None else end_offsets(self.checkpoint, batch_id, decoded.sparkSession)
        if counted is None or not counted["rows"] or offsets is None:
            stats = count_batch(decoded)
            clock.lap("read_decode_stats")
            return stats
        return batch_stats(counted, offsets)

    def _guess_low(self, session: Any) -> int:
        """Where this batch's events are guessed to start (see `apply_from_guess`); any guess is correct."""
        recorded = self._recorded(session)
        if recorded.last_batch_min_seq is not None:
            return recorded.last_batch_min_seq
        high = highest_seq(session, self.lake.table(self.projection.name))
        return 0 if high is None else high + 1

    def _batch(self, session: Any, txn: Txn, events: DataFrame, seq_range: tuple[int, int] | None) -> Batch:
        return Batch(
            session=session,
            batch_id=txn.version,
            projection=self.projection,
            payload=self.payload,
            lake=self.lake,
            txn=txn,
            events=events,
            seq_range=seq_range,
        )

    def _events(self, decoded: DataFrame) -> DataFrame:
        """The records to apply, as the kinds read them: envelope and payload columns of the valid ones."""
        return decoded.where(valid()).select(*_EVENT_COLUMNS, *self.payload.columns.fieldNames())

    def _quarantine(self, decoded: DataFrame, batch_id: int, count: int, txn: Txn) -> None:
        records = decoded.where(bad())
        _log_quarantined(self.projection.name, batch_id, records, count)
        set_aside(
            decoded.sparkSession, self.lake.quarantine(self.projection.name), self.projection.name, records, txn
        )

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

    def _floor(self, session: Any, horizon: DedupHorizon) -> Floor:
        # From what was applied before this batch, not the batch's own newest event: a batch spanning more
        # than the horizon (the first one of a replay) keeps all of its events. A batch that Spark runs again
        # after its progress was recorded gets a higher floor, but changes nothing: the record is written
        # after every table write of the batch, and those are skipped on the retry (Txn).
        recorded = self._recorded(session)
        return horizon.floor(recorded.max_seq, _time(recorded.last_event_time))

    def _refuse_beyond(self, events: DataFrame, horizon: DedupHorizon, floor: Floor, batch_id: int) -> int:
        """Count and log the events behind the floor (refused: the caller leaves them out)."""
        behind = self.projection.kind.beyond_horizon(floor)
        refused = events.where(behind).count()
        if not refused:
            return 0
        sample = [
            {"event_id": r["event_id"], "seq": r["seq"], "topic": r["topic"], "partition": r["partition"],
             "offset": r["offset"]}
            for r in events.where(behind).select("event_id", "seq", "topic", "partition", "offset")
            .limit(5)
            .collect()
        ]
        log.warning(
            "events behind the deduplication horizon refused (not applied)",
            extra={
                "projection": self.projection.name,
                "batch_id": batch_id,
                "count": refused,
                "horizon": horizon.describe(),
                "floor_seq": floor.seq,
                "floor_time": floor.time.isoformat() if floor.time else None,
                "sample": sample,
            },
        )
        return refused

    def _prune(self, session: Any, horizon: DedupHorizon, floor: Floor, batch_id: int) -> None:
        pruned = self.projection.kind.prune(session, self.projection, self.payload, self.lake, floor)
        if not pruned:
            return
        log.info(
            "deduplication state pruned",
            extra={
                "projection": self.projection.name,
                "batch_id": batch_id,
                "rows": pruned,
                "horizon": horizon.describe(),
                "floor_seq": floor.seq,
                "floor_time": floor.time.isoformat() if floor.time else None,
            },
        )


class _Clock:
    """Adds the seconds since its last lap to `phases[name]`."""

    def __init__(self, phases: dict[str, float]) -> None:
        self._phases = phases
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self._phases[name] = round(self._phases.get(name, 0.0) + now - self._last, 3)
        self._last = now


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _seq_range(events: DataFrame) -> tuple[int, int] | None:
    row = events.agg(F.min("seq"), F.max("seq")).first()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def _log_quarantined(projection: str, batch_id: int, records: DataFrame, count: int) -> None:
    sample = [
        {"topic": r["topic"], "partition": r["partition"], "offset": r["offset"], "error": r[ERROR]}
        for r in records.select("topic", "partition", "offset", ERROR).limit(5).collect()
    ]
    log.warning(
        "events quarantined",
        extra={"projection": projection, "batch_id": batch_id, "count": count, "sample": sample},
    )


def _interrupted(exc: BaseException) -> bool:
    # query.stop() interrupts the stream thread; the JVM error then reaches Python as text.
    text = str(exc)
    return "java.lang.InterruptedException" in text or "ClosedByInterruptException" in text
