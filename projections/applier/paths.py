"""The three ways of applying a micro-batch, one chosen per query from what its kind declares (`streaming_path`).

- `TwoPass`: decode the batch into the cache and count it in a Spark job of its own, then apply it. For a kind
  that needs the batch's seq range before it writes, or a horizon's floor checked against its lowest seq.
- `OnePass`: the kind's MERGE is the first read of the batch and counts it as it goes (`projections.observed`),
  for a kind that `counts_while_applying`.
- `FromGuess`: one pass for a kind whose seq range only prunes (`range_only_prunes`): the range's low end is
  guessed before the batch is read, and what lies below the guess is MERGEd in a second write.

A path applies the batch's events and sets its bad records aside; the applier records the progress after it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from projections.applier.steps import Clock, Steps, event_time
from projections.declaration import Projection
from projections.envelope import decode
from projections.kinds.base import highest_seq
from projections.observed import BatchObservation, batch_stats, count_batch, end_offsets
from projections.payload import ResolvedPayload
from projections.progress import BatchStats, Progress
from projections.txn import Txn

#: Appended to the app id of a batch's second write to the same table (`FromGuess`), so each has its own `Txn`.
BELOW_GUESS_TXN = "/below-guess"
#: The top of a seq range that is open above (seqs are BIGINT).
_TOP_SEQ = 2**63 - 1


def streaming_path(spark: Any, projection: Projection, checkpoint: str) -> ApplyPath:
    """The path of the projection's streaming query. A kind whose batches are read once gets them decoded with
    the observation that counts them on (`ApplyPath.source`), and `checkpoint`'s offset log gives their end
    offsets; any other kind's batches are applied in two passes."""
    kind = projection.kind
    if not kind.reads_batches_once:
        return TwoPass()
    observation = BatchObservation(spark, projection.name)
    if kind.range_only_prunes:
        return FromGuess(observation, checkpoint)
    return OnePass(observation, checkpoint)


class ApplyPath(ABC):
    """How a micro-batch is applied: what the query hands over (`source`), and what is done with it (`apply`)."""

    def source(self, stream: DataFrame, projection: Projection, payload: ResolvedPayload) -> DataFrame:
        """What the query should hand to the applier: the Kafka stream as it is."""
        return stream

    @abstractmethod
    def apply(self, steps: Steps, batch: DataFrame, batch_id: int, recorded: Progress, clock: Clock) -> BatchStats:
        """Apply the batch as `source` handed it over (`recorded`: the progress before it) and return what it held."""


class TwoPass(ApplyPath):
    """Counts the batch in a Spark job of its own, then applies it; also what applies a batch handed over by hand."""

    def apply(self, steps: Steps, batch: DataFrame, batch_id: int, recorded: Progress, clock: Clock) -> BatchStats:
        session = batch.sparkSession
        kind = steps.projection.kind
        txn = steps.txn(batch_id)
        decoded = decode(batch, steps.projection, steps.payload).persist()
        try:
            # Reading the batch from Kafka, decoding it into the cache and counting it: one Spark job.
            stats = count_batch(decoded)
            clock.lap("read_decode_stats")
            if stats.quarantined:
                steps.quarantine(decoded, batch_id, stats.quarantined, txn)
                clock.lap("quarantine")
            if stats.applied:
                assert stats.min_seq is not None and stats.max_seq is not None
                events = steps.events(decoded)
                seq_range: tuple[int, int] | None = (stats.min_seq, stats.max_seq)
                guard = steps.guard
                floor = None
                if guard is not None:
                    floor = guard.floor(recorded)
                    if not floor.passes(stats.min_seq, event_time(stats.first_event_time)):
                        refused = guard.refuse(events, floor, batch_id)
                        if refused:
                            events = events.where(~kind.beyond_horizon(floor))
                            seq_range = _seq_range(events)
                        stats = dataclasses.replace(
                            stats, applied=stats.applied - refused, beyond_horizon=refused
                        )
                    clock.lap("horizon")
                if seq_range is not None:
                    refused = kind.apply(steps.batch(session, txn, events, seq_range))
                    clock.lap("kind_apply")
                    if refused:
                        stats = dataclasses.replace(
                            stats,
                            applied=stats.applied - refused,
                            beyond_horizon=stats.beyond_horizon + refused,
                        )
                if guard is not None and floor is not None and guard.horizon.prunes_after(batch_id):
                    guard.prune(session, floor, batch_id)
                    clock.lap("prune")
            return stats
        finally:
            decoded.unpersist()


class OnePass(ApplyPath):
    """Applies a decoded batch carrying the query's observation in one pass (see `projections.observed`).

    The kind's MERGE is the first read of the batch and counts it as it goes; bad records are set aside after
    it, from the batch read again. Each write has its own `Txn`, so a batch Spark runs again after a failure
    between them writes only what is missing.
    """

    def __init__(self, observation: BatchObservation, checkpoint: str) -> None:
        self.observation = observation
        self.checkpoint = checkpoint

    def source(self, stream: DataFrame, projection: Projection, payload: ResolvedPayload) -> DataFrame:
        """The stream decoded, with the observation on it."""
        return self.observation.attach(decode(stream, projection, payload))

    def apply(self, steps: Steps, batch: DataFrame, batch_id: int, recorded: Progress, clock: Clock) -> BatchStats:
        txn = steps.txn(batch_id)
        refused = steps.projection.kind.apply(steps.batch(batch.sparkSession, txn, steps.events(batch), None))
        clock.lap("read_decode_apply")
        return self._finish(steps, batch, txn, self._observed(batch, batch_id, clock), refused, clock)

    def _finish(
        self, steps: Steps, decoded: DataFrame, txn: Txn, stats: BatchStats, refused: int, clock: Clock
    ) -> BatchStats:
        """The end of a one-pass batch: `refused` events out of the applied, and the bad records set aside (the
        batch read again, after its counts were taken)."""
        if refused:
            stats = dataclasses.replace(stats, applied=stats.applied - refused, beyond_horizon=refused)
        if stats.quarantined:
            steps.quarantine(decoded, txn.version, stats.quarantined, txn)
            clock.lap("quarantine")
        return stats

    def _observed(self, decoded: DataFrame, batch_id: int, clock: Clock) -> BatchStats:
        """What the batch's first write counted as it read the batch, with the offset log's end offsets. If it
        read nothing (Spark runs again a batch whose write had landed, and `Txn` skipped it; or the batch is
        empty), or the observation or offsets are not to be had, the batch is counted the old way."""
        counted = self.observation.metrics(batch_id)
        offsets = end_offsets(self.checkpoint, batch_id, decoded.sparkSession)
        if counted is None or not counted["rows"] or offsets is None:
            stats = count_batch(decoded)
            clock.lap("read_decode_stats")
            return stats
        return batch_stats(counted, offsets)


class FromGuess(OnePass):
    """Applies a decoded batch carrying the query's observation, for a kind whose seq range only prunes.

    The range's low end is guessed before the batch is read: where the batch before began (the stream's
    partitions move forward together), or, with no batch recorded, above the table's highest seq (Delta
    answers that MAX from its files' statistics). The kind's MERGE of the events from there up is the first
    read of the batch, which the observation counts. Events below the guess (a replay, a lagging
    partition, a re-send) are MERGEd in a second pass, under a `Txn` of their own: both writes go to one
    table, and a shared one would make the second skip itself. The horizon's floor filters both; what it
    refused is counted afterwards, only when the batch's earliest event could be behind it.
    """

    def apply(self, steps: Steps, batch: DataFrame, batch_id: int, recorded: Progress, clock: Clock) -> BatchStats:
        session = batch.sparkSession
        kind = steps.projection.kind
        txn = steps.txn(batch_id)
        low = _guess_low(steps, session, recorded)
        guard = steps.guard
        floor = None if guard is None else guard.floor(recorded)
        events = steps.events(batch)
        if floor is not None:
            events = events.where(~kind.beyond_horizon(floor))
        refused = kind.apply(steps.batch(session, txn, events.where(F.col("seq") >= F.lit(low)), (low, _TOP_SEQ)))
        clock.lap("read_decode_merge")
        stats = self._observed(batch, batch_id, clock)
        if (
            guard is not None
            and floor is not None
            and stats.applied
            and not floor.passes(stats.min_seq, event_time(stats.first_event_time))
        ):
            refused += guard.refuse(steps.events(batch), floor, batch_id)
            clock.lap("horizon")
        if stats.min_seq is not None and stats.min_seq < low:
            below = events.where(F.col("seq") < F.lit(low))
            refused += kind.apply(
                steps.batch(session, steps.txn(batch_id, BELOW_GUESS_TXN), below, (stats.min_seq, low - 1))
            )
            clock.lap("merge_below_guess")
        if guard is not None and floor is not None and guard.horizon.prunes_after(batch_id):
            guard.prune(session, floor, batch_id)
            clock.lap("prune")
        return self._finish(steps, batch, txn, stats, refused, clock)


def _guess_low(steps: Steps, session: Any, recorded: Progress) -> int:
    """Where this batch's events are guessed to start (see `FromGuess`); any guess is correct."""
    if recorded.last_batch_min_seq is not None:
        return recorded.last_batch_min_seq
    high = highest_seq(session, steps.lake.table(steps.projection.name))
    return 0 if high is None else high + 1


def _seq_range(events: DataFrame) -> tuple[int, int] | None:
    row = events.agg(F.min("seq"), F.max("seq")).first()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])
