"""The deduplication horizon: how far behind the stream's high-water mark a duplicate is still recognised.

Kinds that deduplicate by event id (`EventLog`, `WindowedCounts`) keep what they need for it only within
the horizon, and `Fold` keeps its events for re-folds only within it, so that state stops growing with the
stream. The horizon trails the highest seq or the latest event time the projection applied before the
batch at hand (its progress record, which only moves forward), never the wall clock: a replay from
earliest walks the horizon along with it. An event that falls behind the horizon's floor can no longer be
told apart from a duplicate (or, for `Fold`, be folded in seq order), so it is refused: not applied,
logged and counted (`events_beyond_horizon` in the progress record), rather than applied again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from projections.errors import DeclarationError


@dataclass(frozen=True)
class DedupHorizon:
    """A horizon of `seqs` sequence numbers or of `time` in event time (exactly one), pruned every few batches.

    `prune_every`: state behind the floor is deleted on batches whose id is a multiple of it, so pruning
    costs one small Delta DELETE now and then instead of a rewrite in every batch.
    """

    seqs: int | None = None
    time: timedelta | None = None
    prune_every: int = 20

    def __post_init__(self) -> None:
        if (self.seqs is None) == (self.time is None):
            raise DeclarationError("a dedup horizon takes exactly one of seqs or time")
        if self.seqs is not None and self.seqs < 1:
            raise DeclarationError(f"dedup horizon of {self.seqs} seqs: must be at least 1")
        if self.time is not None and self.time <= timedelta(0):
            raise DeclarationError(f"dedup horizon of {self.time}: must be positive")
        if self.prune_every < 1:
            raise DeclarationError(f"dedup horizon prune_every={self.prune_every}: must be at least 1")

    def floor(self, high_seq: int | None, high_time: datetime | None) -> Floor:
        """Where the horizon stands once the stream has reached `high_seq` / `high_time`."""
        if self.seqs is not None:
            return Floor(seq=None if high_seq is None else high_seq - self.seqs)
        assert self.time is not None
        return Floor(time=None if high_time is None else high_time - self.time)

    def describe(self) -> str:
        return f"{self.seqs} seqs" if self.seqs is not None else f"{self.time} of event time"

    def prunes_after(self, batch_id: int) -> bool:
        """True on the batches that prune state behind the floor."""
        return batch_id % self.prune_every == 0


@dataclass(frozen=True)
class Floor:
    """The oldest seq or event time still inside the horizon (None: nothing is behind it yet)."""

    seq: int | None = None
    time: datetime | None = None

    def passes(self, seq: int | None, time: datetime | None) -> bool:
        """False when an event at (`seq`, `time`) could be behind this floor (None: unknown, so maybe)."""
        if self.seq is not None:
            return seq is not None and seq >= self.seq
        if self.time is not None:
            return time is not None and time >= self.time
        return True


# A week of event time, as long as the tombstone retention: longer than a consumer is usually down.
DEFAULT_DEDUP_HORIZON: Final = DedupHorizon(time=timedelta(days=7))
