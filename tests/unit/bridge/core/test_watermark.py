"""The ack tracker: the watermark is the acknowledged contiguous prefix, whatever the ack order and holes."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from bridge.core.holes import SeqRange
from bridge.core.watermark import AckTracker, TrackingError
from bridge.errors import OutboxError

pytestmark = pytest.mark.unit

HUGE = 10**12


class ReferenceModel:
    """A naive model: the accounted seqs as an ordered list, the watermark recomputed from scratch."""

    def __init__(self, start: int) -> None:
        self.base = start
        self.items: list[tuple[int, int, str]] = []  # (first seq, last seq, "event" | "hole")
        self.sizes: dict[int, int] = {}
        self.acked: set[int] = set()

    @property
    def position(self) -> int:
        return self.items[-1][1] if self.items else self.base

    @property
    def watermark(self) -> int:
        watermark = self.base
        for first, last, kind in self.items:
            if kind == "event" and first not in self.acked:
                break
            watermark = last
        return watermark

    def events(self) -> list[int]:
        return [first for first, _, kind in self.items if kind == "event"]

    def reset(self, to: int) -> None:
        self.base = to
        self.items.clear()
        self.sizes.clear()
        self.acked.clear()


gaps = st.one_of(st.integers(0, 3), st.integers(0, HUGE))


@given(
    start=st.integers(0, HUGE),
    steps=st.lists(st.tuples(gaps, st.integers(0, 10_000)), min_size=1, max_size=60),
    data=st.data(),
)
def test_watermark_is_the_acknowledged_prefix_for_any_ack_order(
    start: int, steps: list[tuple[int, int]], data: st.DataObject
) -> None:
    tracker, model = AckTracker(start), ReferenceModel(start)
    for gap, size in steps:
        if gap:
            assert tracker.settle(SeqRange(model.position + 1, model.position + gap)) == gap
            model.items.append((model.position + 1, model.position + gap, "hole"))
        seq = model.position + 1
        tracker.track(seq, size)
        model.items.append((seq, seq, "event"))
    assert tracker.watermark == model.watermark
    previous = tracker.watermark
    for seq in data.draw(st.permutations(model.events())):
        assert tracker.ack(seq) is True
        model.acked.add(seq)
        assert tracker.watermark == model.watermark >= previous
        previous = tracker.watermark
    assert tracker.watermark == model.position
    assert tracker.in_flight_count == tracker.in_flight_bytes == tracker.unacked_count == 0
    assert tracker.oldest_unacked is None


class TrackerRun:
    """Interleaves tracking, holes, acks in any order, stale and repeated acks, rewinds and replays: each step
    is one of the rules that apply in the current state, with its arguments, as `rng` chooses."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.tracker = AckTracker(0)
        self.model = ReferenceModel(0)
        self.floor = 0  # the watermark may only drop below this through an explicit reset

    def rules(self) -> list[Callable[[], object]]:
        rules: list[Callable[[], object]] = [self.settle_holes, self.track, self.rewind, self.replay]
        if self._unacked():
            rules.append(self.ack)
        if self.model.acked:
            rules.append(self.ack_again)
        if self.tracker.generation > 0 and self.model.events():
            rules.append(self.ack_from_a_discarded_producer)
        return rules

    def settle_holes(self) -> int:
        # As `gaps` draws them: as often a narrow hole as one of any width up to HUGE.
        gap = self.rng.randint(0, 3) if self.rng.getrandbits(1) else self.rng.randint(0, HUGE)
        position = self.model.position
        if gap:
            assert self.tracker.settle(SeqRange(position + 1, position + gap)) == gap
            self.model.items.append((position + 1, position + gap, "hole"))
        return gap

    def track(self) -> int:
        size = self.rng.randint(0, 5_000)
        seq = self.model.position + 1
        self.tracker.track(seq, size)
        self.model.items.append((seq, seq, "event"))
        self.model.sizes[seq] = size
        return seq

    def ack(self) -> int:
        seq = self.rng.choice(self._unacked())
        assert self.tracker.ack(seq, self.tracker.generation) is True
        self.model.acked.add(seq)
        return seq

    def ack_again(self) -> int:
        seq = self.rng.choice(sorted(self.model.acked))
        assert self.tracker.ack(seq) is False
        return seq

    def ack_from_a_discarded_producer(self) -> tuple[int, int]:
        seq = self.rng.choice(self.model.events())
        stale = self.rng.randint(0, self.tracker.generation - 1)
        assert self.tracker.ack(seq, stale) is False
        return seq, stale

    def rewind(self) -> int:
        watermark = self.model.watermark
        assert self.tracker.rewind() == watermark
        self.model.reset(watermark)
        return watermark

    def replay(self) -> int:
        to = max(0, self.model.watermark - self.rng.randint(0, 50))
        assert self.tracker.reset(to) == to
        self.model.reset(to)
        self.floor = to
        return to

    def check(self) -> None:
        """The watermark matches the model and never goes back; the in-flight accounting matches the model."""
        assert self.tracker.watermark == self.model.watermark
        assert self.tracker.watermark >= self.floor
        self.floor = self.tracker.watermark
        watermark = self.model.watermark
        above = [s for s in self.model.events() if s > watermark]
        unacked = self._unacked()
        assert self.tracker.position == self.model.position
        assert self.tracker.in_flight_count == len(above)
        assert self.tracker.in_flight_bytes == sum(self.model.sizes[s] for s in above)
        assert self.tracker.unacked_count == len(unacked)
        assert self.tracker.unacked_bytes == sum(self.model.sizes[s] for s in unacked)
        assert self.tracker.oldest_unacked == (min(unacked) if unacked else None)

    def _unacked(self) -> list[int]:
        return [s for s in self.model.events() if s not in self.model.acked]


# The steps are drawn through a Random that Hypothesis drives and shrinks, rather than by a RuleBasedStateMachine:
# the same rules and checks after every step, at a tenth of the cost per step; `note` prints a failing run.
@settings(max_examples=200, deadline=None)
@given(rng=st.randoms(use_true_random=False, note_method_calls=False), steps=st.integers(0, 60))
def test_any_interleaving_keeps_the_watermark_and_the_in_flight_accounting_right(
    rng: random.Random, steps: int
) -> None:
    run = TrackerRun(rng)
    run.check()
    for _ in range(steps):
        rule = rng.choice(run.rules())
        note(f"{rule.__name__} -> {rule()}")
        run.check()


def test_starts_at_the_given_watermark() -> None:
    tracker = AckTracker(41)
    assert (tracker.watermark, tracker.position, tracker.in_flight_count, tracker.oldest_unacked) == (
        41,
        41,
        0,
        None,
    )


def test_out_of_order_acks_hold_the_watermark_at_the_oldest_unacked() -> None:
    tracker = AckTracker(0)
    for seq in (1, 2, 3):
        tracker.track(seq, 10)
    tracker.ack(3)
    tracker.ack(2)
    assert tracker.watermark == 0
    assert tracker.oldest_unacked == 1
    assert (tracker.in_flight_count, tracker.unacked_count) == (3, 1)
    tracker.ack(1)
    assert tracker.watermark == 3
    assert tracker.in_flight_count == 0


def test_holes_between_events_are_passed_once_the_event_before_them_is_acked() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    assert tracker.settle(SeqRange(2, 10)) == 9
    tracker.track(11, 1)
    tracker.ack(11)
    assert tracker.watermark == 0
    tracker.ack(1)
    assert tracker.watermark == 11


def test_holes_with_nothing_in_flight_move_the_watermark_at_once() -> None:
    tracker = AckTracker(5)
    assert tracker.settle(SeqRange(6, 8)) == 3
    assert tracker.watermark == 8


def test_a_gap_of_a_billion_and_more_is_constant_time() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    assert tracker.settle(SeqRange(2, 10**18)) == 10**18 - 1
    tracker.track(10**18 + 1, 1)
    tracker.ack(1)
    assert tracker.watermark == 10**18
    tracker.ack(10**18 + 1)
    assert tracker.watermark == 10**18 + 1


def test_a_settled_hole_that_does_not_follow_the_position_is_refused_as_a_bug() -> None:
    # Only a gap the reader reported right after the cursor may be settled; anything else would skip.
    tracker = AckTracker(3)
    with pytest.raises(TrackingError, match=r"settled hole 5\.\.6 does not follow seq 3"):
        tracker.settle(SeqRange(5, 6))
    assert tracker.watermark == tracker.position == 3


def test_track_refuses_an_unexplained_gap_and_names_the_missing_seqs() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    with pytest.raises(TrackingError, match=r"seqs 2\.\.4 were neither tracked nor settled"):
        tracker.track(5, 1)


@pytest.mark.parametrize("seq", [0, 1, 2])
def test_track_refuses_seqs_already_accounted(seq: int) -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    tracker.settle(SeqRange(2, 2))
    with pytest.raises(TrackingError, match="out of order"):
        tracker.track(seq, 1)


def test_settle_refuses_going_backwards() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    with pytest.raises(TrackingError, match="does not follow seq 1"):
        tracker.settle(SeqRange(1, 1))


def test_track_refuses_a_negative_size() -> None:
    with pytest.raises(ValueError, match="size_bytes"):
        AckTracker(0).track(1, -1)


def test_ack_of_a_seq_never_tracked_raises() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    with pytest.raises(TrackingError, match="seq 7, which is not in flight"):
        tracker.ack(7)


def test_ack_of_a_hole_above_the_watermark_raises() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    tracker.settle(SeqRange(2, 3))
    tracker.track(4, 1)
    with pytest.raises(TrackingError):
        tracker.ack(2)


def test_tracking_error_is_an_outbox_error() -> None:
    assert issubclass(TrackingError, OutboxError)


def test_double_ack_is_idempotent_and_returns_false() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    tracker.track(2, 1)
    assert tracker.ack(2) is True
    assert tracker.ack(2) is False  # still in the window, already acknowledged
    assert tracker.ack(1) is True
    assert tracker.ack(1) is False  # now below the watermark
    assert tracker.watermark == 2


def test_rewind_drops_everything_in_flight_and_resumes_after_the_watermark() -> None:
    tracker = AckTracker(0)
    for seq in (1, 2, 3):
        tracker.track(seq, 100)
    tracker.ack(1)
    tracker.ack(3)
    assert tracker.rewind() == 1
    assert (tracker.position, tracker.in_flight_count, tracker.in_flight_bytes) == (1, 0, 0)
    assert tracker.unacked_count == tracker.unacked_bytes == 0
    tracker.track(2, 100)  # the reader re-reads from watermark + 1


def test_acks_from_a_discarded_producer_are_ignored() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    old = tracker.generation
    tracker.rewind()
    tracker.track(1, 1)
    assert tracker.ack(1, old) is False
    assert tracker.watermark == 0
    assert tracker.ack(1, tracker.generation) is True
    assert tracker.watermark == 1


def test_stale_ack_for_a_seq_not_yet_re_read_is_ignored_not_an_error() -> None:
    tracker = AckTracker(0)
    tracker.track(1, 1)
    old = tracker.generation
    tracker.rewind()
    assert tracker.ack(1, old) is False


def test_reset_moves_the_watermark_back_for_a_replay() -> None:
    tracker = AckTracker(100)
    assert tracker.reset(10) == 10
    assert tracker.watermark == tracker.position == 10
    tracker.track(11, 1)


def test_has_room_bounds_events() -> None:
    tracker = AckTracker(0, max_in_flight=2)
    tracker.track(1, 1)
    assert tracker.has_room(1)
    tracker.track(2, 1)
    assert not tracker.has_room(1)
    tracker.ack(2)  # acked but held behind seq 1: still in the window
    assert not tracker.has_room(1)
    tracker.ack(1)
    assert tracker.has_room(1)


def test_has_room_bounds_bytes() -> None:
    tracker = AckTracker(0, max_in_flight_bytes=100)
    tracker.track(1, 60)
    assert tracker.has_room(40)
    assert not tracker.has_room(41)


def test_an_event_larger_than_the_byte_limit_goes_out_alone() -> None:
    tracker = AckTracker(0, max_in_flight_bytes=100)
    assert tracker.has_room(1_000)
    tracker.track(1, 1_000)
    assert not tracker.has_room(1)


def test_no_limits_means_always_room() -> None:
    tracker = AckTracker(0)
    for seq in range(1, 1_001):
        tracker.track(seq, 10**6)
    assert tracker.has_room(10**9)


@pytest.mark.parametrize("kwargs", [{"max_in_flight": 0}, {"max_in_flight_bytes": 0}])
def test_limits_must_be_positive(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        AckTracker(0, **kwargs)
