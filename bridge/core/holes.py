"""Holes in the seq order and when they are settled: the reader's horizon rule as pure logic, no I/O.

A read sees the rows committed before it. A seq missing below a visible seq is a hole: its writer is
still running, or rolled back. The hole is marked with the read's `horizon.high` (every transaction
that could own it started below that mark). Once a later read's `horizon.low` reaches the mark, every
such transaction has finished, so that read is authoritative about the hole: a row present there is
delivered, a row absent is a permanent hole ("settled"). The reader publishes only the contiguous run
after where the read started, so an event is never skipped, and never delivered twice or out of seq
order. Settled holes are reported to the ack tracker, which takes exactly those and nothing else.

On PostgreSQL `low` is `pg_snapshot_xmin` of the read's snapshot and `high` a fresh transaction id taken after
it when the read sees a gap (`pg_snapshot_xmax` is only latestCompletedXid + 1, too low); the rule
needs every writer to take its transaction id before its seq (see the first migration).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Horizon:
    """Commit visibility at the moment of a read: `low` has every earlier transaction finished, and
    every transaction that was running or could still commit started below `high`."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"horizon low {self.low} is above high {self.high}")


@dataclass(frozen=True, slots=True)
class SeqRange:
    """The seqs `first..last`, both included."""

    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class Advance:
    """What one read allows: the seqs to deliver in order, the holes passed over as permanent (each
    before a delivered seq), the last seq delivered or settled, and the first hole still being waited
    on (None when nothing blocks)."""

    deliver: tuple[int, ...]
    settled: tuple[SeqRange, ...]
    through: int
    waiting_on: SeqRange | None


class _Marks:
    """Unsettled holes as disjoint, sorted ranges, each with the horizon mark it was first seen under."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int, int]] = []

    def mark(self, first: int, last: int, high: int) -> int:
        """The latest mark over `first..last`; parts seen for the first time are recorded with `high`."""
        marks: list[int] = []
        fresh: list[tuple[int, int, int]] = []
        next_seq = first
        for start, end, mark in self.ranges:
            if end < first or start > last:
                continue
            if start > next_seq:
                fresh.append((next_seq, start - 1, high))
            marks.append(mark)
            next_seq = max(next_seq, end + 1)
        if next_seq <= last:
            fresh.append((next_seq, last, high))
        if fresh:
            self.ranges = sorted(self.ranges + fresh)
            return high
        return max(marks)

    def forget(self, first: int, last: int) -> None:
        """Drop `first..last` from every range (delivered or settled), splitting ranges as needed."""
        kept: list[tuple[int, int, int]] = []
        for start, end, mark in self.ranges:
            if end < first or start > last:
                kept.append((start, end, mark))
                continue
            if start < first:
                kept.append((start, first - 1, mark))
            if end > last:
                kept.append((last + 1, end, mark))
        self.ranges = kept

    def covers(self, seq: int) -> bool:
        index = bisect_right(self.ranges, seq, key=lambda hole: hole[0]) - 1
        return index >= 0 and self.ranges[index][0] <= seq <= self.ranges[index][1]


class HoleRule:
    """Decides, per read, what the reader may deliver and which gaps are permanent.

    The rule keeps no cursor: the caller passes the seq the read started after (the ack tracker's
    position, the bridge's one cursor), and feeds it only reads that fully succeeded. What it keeps
    are the marks of holes still being waited on, which are facts about the database ("every owner of
    this seq started below this mark") and stay true whatever the caller does with a read's result.
    """

    def __init__(self) -> None:
        self._marks = _Marks()

    @property
    def pending(self) -> tuple[SeqRange, ...]:
        """Holes seen and not yet settled, in seq order."""
        return tuple(SeqRange(start, end) for start, end, _ in self._marks.ranges)

    def forget(self) -> None:
        """Drop every mark (a replay or a producer rebuild restarts the reading lower down)."""
        self._marks = _Marks()

    def advance(self, after: int, visible: Iterable[int], horizon: Horizon) -> Advance:
        """Take one read that started after seq `after`: its visible seqs (any order; those at or below
        `after` are ignored) and its horizon. Return what may be delivered now, in order."""
        seqs = sorted({seq for seq in visible if seq > after})
        deliver: list[int] = []
        settled: list[SeqRange] = []
        waiting_on: SeqRange | None = None
        position = after
        for index, seq in enumerate(seqs):
            if seq > position + 1:
                gap = SeqRange(position + 1, seq - 1)
                if horizon.low < self._marks.mark(gap.first, gap.last, horizon.high):
                    waiting_on = gap
                    self._remember_gaps(seqs[index:], after=seq, high=horizon.high)
                    break
                self._marks.forget(gap.first, gap.last)
                settled.append(gap)
            if self._marks.covers(seq):
                self._marks.forget(seq, seq)
            deliver.append(seq)
            position = seq
        return Advance(tuple(deliver), tuple(settled), position, waiting_on)

    def _remember_gaps(self, seqs: list[int], after: int, high: int) -> None:
        # Holes beyond the blocking one are marked now, under this read's horizon, so they settle as
        # early as possible; seqs now visible are no longer holes.
        previous = after
        for seq in seqs:
            if self._marks.covers(seq):
                self._marks.forget(seq, seq)
            if seq > previous + 1:
                self._marks.mark(previous + 1, seq - 1, high)
            previous = seq
