"""The horizon rule as pure logic: examples, and a simulation of PostgreSQL writers against the tracker."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.core.holes import Advance, HoleRule, Horizon, SeqRange

pytestmark = pytest.mark.unit

QUIET = Horizon(low=10, high=10)  # no transaction running: every hole seen is settled at once


class HoleTracker:
    """The rule driven as the reader drives it: each read starts after the last seq delivered or settled."""

    def __init__(self, cursor: int = 0) -> None:
        self.rule = HoleRule()
        self.cursor = cursor

    def advance(self, visible: Sequence[int], horizon: Horizon) -> Advance:
        step = self.rule.advance(self.cursor, visible, horizon)
        self.cursor = step.through
        return step

    @property
    def pending(self) -> tuple[SeqRange, ...]:
        return self.rule.pending

    def rewind(self, cursor: int) -> None:
        self.cursor = cursor
        self.rule.forget()


def test_contiguous_seqs_are_delivered_in_order_and_move_the_cursor() -> None:
    tracker = HoleTracker(cursor=0)
    step = tracker.advance([3, 1, 2], Horizon(low=5, high=9))
    assert step.deliver == (1, 2, 3)
    assert step.settled == ()
    assert step.waiting_on is None
    assert tracker.cursor == step.through == 3


def test_seqs_at_or_below_the_cursor_and_repeats_are_ignored() -> None:
    tracker = HoleTracker(cursor=5)
    assert tracker.advance([4, 5, 6, 6], QUIET).deliver == (6,)


def test_a_hole_blocks_everything_after_it_until_it_fills() -> None:
    tracker = HoleTracker(cursor=0)
    first = tracker.advance([1, 3, 4], Horizon(low=100, high=105))
    assert first.deliver == (1,)
    assert first.waiting_on == SeqRange(2, 2)
    assert tracker.pending == (SeqRange(2, 2),)

    late = tracker.advance([2, 3, 4], Horizon(low=100, high=106))
    assert late.deliver == (2, 3, 4)
    assert late.settled == ()
    assert tracker.pending == ()


def test_a_hole_settles_once_the_low_horizon_reaches_the_mark_it_was_first_seen_under() -> None:
    tracker = HoleTracker(cursor=0)
    tracker.advance([2], Horizon(low=100, high=105))  # hole 1 marked 105
    assert tracker.advance([2], Horizon(low=104, high=110)).deliver == ()
    step = tracker.advance([2], Horizon(low=105, high=111))
    assert step.settled == (SeqRange(1, 1),)
    assert step.deliver == (2,)
    assert tracker.cursor == 2


def test_a_hole_seen_when_no_transaction_runs_is_settled_by_that_same_read() -> None:
    step = HoleTracker(cursor=0).advance([3], QUIET)
    assert step.settled == (SeqRange(1, 2),)
    assert step.deliver == (3,)


def test_holes_beyond_the_blocking_one_keep_the_mark_of_their_first_sighting() -> None:
    tracker = HoleTracker(cursor=0)
    tracker.advance([2, 4], Horizon(low=100, high=105))  # holes 1 and 3, both marked 105
    assert tracker.pending == (SeqRange(1, 1), SeqRange(3, 3))
    step = tracker.advance([2, 4], Horizon(low=105, high=200))
    assert step.settled == (SeqRange(1, 1), SeqRange(3, 3))
    assert step.deliver == (2, 4)


def test_a_later_hole_is_not_settled_before_its_own_writers_finish() -> None:
    tracker = HoleTracker(cursor=0)
    tracker.advance([1, 3, 5], Horizon(low=100, high=105))  # holes 2 and 4, both marked 105
    step = tracker.advance([1, 2, 3, 5], Horizon(low=104, high=110))  # 2 committed; 4's writer may run
    assert step.deliver == (2, 3)
    assert step.waiting_on == SeqRange(4, 4)


def test_a_partly_filled_hole_is_split_and_keeps_its_mark() -> None:
    tracker = HoleTracker(cursor=0)
    tracker.advance([6], Horizon(low=100, high=105))  # 1..5 marked 105
    step = tracker.advance([3, 6], Horizon(low=101, high=150))
    assert step.deliver == ()
    assert tracker.pending == (SeqRange(1, 2), SeqRange(4, 5))
    step = tracker.advance([3, 6], Horizon(low=105, high=160))
    assert step.settled == (SeqRange(1, 2), SeqRange(4, 5))
    assert step.deliver == (3, 6)


def test_a_huge_jump_settles_as_one_range_without_walking_it() -> None:
    tracker = HoleTracker(cursor=0)
    step = tracker.advance([1, 10**15], QUIET)
    assert step.settled == (SeqRange(2, 10**15 - 1),)
    assert step.settled[0].count == 10**15 - 2
    assert step.deliver == (1, 10**15)


def test_rewind_forgets_pending_holes() -> None:
    tracker = HoleTracker(cursor=0)
    tracker.advance([2], Horizon(low=1, high=5))
    tracker.rewind(0)
    assert tracker.pending == ()
    assert tracker.cursor == 0


def test_a_horizon_whose_low_is_above_its_high_is_refused() -> None:
    with pytest.raises(ValueError, match="above"):
        Horizon(low=6, high=5)


# ------------------------------------------------------------------------------------- simulation


@dataclass
class Writer:
    xid: int
    seqs: list[int] = field(default_factory=list)


@dataclass
class Database:
    """PostgreSQL visibility, reduced: an xid is taken before any seq (outbox_next_seq), a snapshot's
    xmax is the next xid, its xmin the oldest running xid, and committed rows are visible."""

    next_xid: int = 100
    next_seq: int = 1
    running: dict[int, Writer] = field(default_factory=dict)
    committed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)

    def begin(self) -> None:
        self.running[self.next_xid] = Writer(self.next_xid)
        self.next_xid += 1

    def take_seq(self, xid: int) -> None:
        self.running[xid].seqs.append(self.next_seq)
        self.next_seq += 1

    def finish(self, xid: int, commit: bool) -> None:
        writer = self.running.pop(xid)
        (self.committed if commit else self.aborted).update(writer.seqs)

    def read(self, after: int, limit: int) -> tuple[list[int], Horizon]:
        xmax = self.next_xid
        xmin = min(self.running, default=xmax)
        visible = sorted(seq for seq in self.committed if seq > after)[:limit]
        return visible, Horizon(low=xmin, high=xmax)


def run_reader(db: Database, tracker: HoleTracker, limit: int, delivered: list[int], settled: set[int]) -> None:
    visible, horizon = db.read(tracker.cursor, limit)
    step = tracker.advance(visible, horizon)
    delivered.extend(step.deliver)
    for hole in step.settled:
        settled.update(range(hole.first, hole.last + 1))


def simulate(choose: Callable[[Sequence[Any]], Any], steps: int, limit: int) -> None:
    """Writers and one reader interleaved as `choose` decides; then everyone finishes and the reader
    catches up. Checks the tracker's promise after every step and at the end."""
    db = Database()
    tracker = HoleTracker(cursor=0)
    delivered: list[int] = []
    settled: set[int] = set()
    for _ in range(steps):
        actions = ["write", "begin", "read"] + (["take", "finish", "finish"] if db.running else [])
        action = choose(actions)
        if action == "write":
            db.begin()
            db.take_seq(db.next_xid - 1)
        elif action == "begin":
            db.begin()  # a transaction with an xid and no seq yet still holds the horizon back
        elif action == "take":
            db.take_seq(choose(sorted(db.running)))
        elif action == "finish":
            db.finish(choose(sorted(db.running)), commit=choose([True, False]))
        else:
            run_reader(db, tracker, limit, delivered, settled)
        assert delivered == sorted(set(delivered)), "delivered out of order or twice"
        assert not set(delivered) & db.aborted, "delivered a rolled-back seq"
        assert not settled & db.committed, "settled a committed seq as a hole: it would be lost"
    for xid in sorted(db.running):
        db.finish(xid, commit=choose([True, False]))
    for _ in range(db.next_seq // limit + 2):
        run_reader(db, tracker, limit, delivered, settled)
    assert delivered == sorted(db.committed), "a committed seq was never delivered"
    assert not settled & db.committed


# Each choice is drawn through a Random that Hypothesis drives (and shrinks): the same search as drawing
# st.sampled_from(options) per choice, at a fifth of the cost, since no strategy is built per draw.
@settings(max_examples=300, deadline=None)
@given(rng=st.randoms(use_true_random=False), steps=st.integers(min_value=1, max_value=60),
       limit=st.integers(min_value=1, max_value=8))
def test_every_committed_seq_is_delivered_once_in_order_and_no_aborted_one(
    rng: random.Random, steps: int, limit: int
) -> None:
    simulate(rng.choice, steps, limit)


def test_many_random_schedules_never_lose_repeat_or_reorder() -> None:
    # Cheap breadth next to Hypothesis's shrinking: thousands of interleavings in about a second.
    for seed in range(3000):
        rng = random.Random(seed)
        simulate(rng.choice, steps=rng.randint(1, 80), limit=rng.randint(1, 10))


def test_a_writer_that_took_its_seq_before_its_xid_would_be_lost() -> None:
    """Why outbox_next_seq takes the xid first: a seq holder with no xid is invisible to the horizon."""
    db = Database()
    seq_without_xid = db.next_seq  # a plain nextval() default: the seq comes before the xid
    db.next_seq += 1
    db.begin()
    other = max(db.running)
    db.take_seq(other)
    db.finish(other, commit=True)
    tracker = HoleTracker(cursor=0)
    visible, horizon = db.read(0, 100)
    step = tracker.advance(visible, horizon)
    assert step.settled == (SeqRange(seq_without_xid, seq_without_xid),)  # settled, yet it may still commit
