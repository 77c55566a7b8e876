"""Exponential backoff: grows, is capped, is jittered within bounds, and starts over after a reset."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.backoff import Backoff, BackoffPolicy

pytestmark = pytest.mark.unit


def no_jitter_draw() -> float:
    return 0.0


def test_delays_double_up_to_the_cap() -> None:
    backoff = Backoff(BackoffPolicy(initial_s=0.1, cap_s=1.0, multiplier=2.0, jitter=0.5), no_jitter_draw)
    delays = [backoff.next_delay() for _ in range(7)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert backoff.attempts == 7


def test_reset_starts_over() -> None:
    backoff = Backoff(BackoffPolicy(initial_s=0.5, cap_s=10.0, jitter=0), no_jitter_draw)
    backoff.next_delay()
    backoff.next_delay()
    backoff.reset()
    assert backoff.attempts == 0
    assert backoff.next_delay() == 0.5


def test_jitter_takes_off_at_most_its_fraction() -> None:
    policy = BackoffPolicy(initial_s=1.0, cap_s=1.0, jitter=0.25)
    assert policy.delay(0, lambda: 0.0) == 1.0
    assert policy.delay(0, lambda: 0.999999) == pytest.approx(0.75, abs=1e-5)


def test_full_jitter_can_go_down_to_nearly_zero() -> None:
    assert BackoffPolicy(initial_s=2.0, cap_s=2.0, jitter=1.0).delay(0, lambda: 0.999) == pytest.approx(0.002)


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert BackoffPolicy(cap_s=30.0).ceiling(10**9) == 30.0


def test_a_multiplier_of_one_is_a_constant_delay() -> None:
    policy = BackoffPolicy(initial_s=0.3, cap_s=5.0, multiplier=1.0)
    assert policy.ceiling(0) == policy.ceiling(10**6) == 0.3


def test_default_random_source_is_used_when_none_given() -> None:
    delay = Backoff(BackoffPolicy(initial_s=1.0, cap_s=1.0, jitter=0.5)).next_delay()
    assert 0.5 < delay <= 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_s": 0}, "initial_s"),
        ({"initial_s": 2.0, "cap_s": 1.0}, "cap_s"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
    ],
)
def test_policy_refuses_nonsense(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackoffPolicy(**kwargs)


def test_negative_attempt_is_refused() -> None:
    with pytest.raises(ValueError, match="attempt"):
        BackoffPolicy().ceiling(-1)


@given(
    initial=st.floats(0.001, 10),
    cap_factor=st.floats(1, 1000),
    multiplier=st.floats(1, 10),
    jitter=st.floats(0, 1),
    seed=st.integers(0, 2**32),
    attempts=st.integers(1, 200),
)
def test_delays_stay_within_jitter_bounds_and_ceilings_never_shrink(
    initial: float, cap_factor: float, multiplier: float, jitter: float, seed: int, attempts: int
) -> None:
    policy = BackoffPolicy(
        initial_s=initial, cap_s=initial * cap_factor, multiplier=multiplier, jitter=jitter
    )
    rand = random.Random(seed).random
    previous_ceiling = 0.0
    for attempt in range(attempts):
        ceiling = policy.ceiling(attempt)
        assert initial <= ceiling <= policy.cap_s
        assert ceiling >= previous_ceiling
        previous_ceiling = ceiling
        delay = policy.delay(attempt, rand)
        assert ceiling * (1 - jitter) - 1e-9 <= delay <= ceiling
