"""The deduplication horizon: where its floor stands, when it prunes, what a declaration may say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from projections.errors import DeclarationError
from projections.horizon import DEFAULT_DEDUP_HORIZON, DedupHorizon, Floor

pytestmark = pytest.mark.unit

T = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_a_seq_horizon_trails_the_highest_seq() -> None:
    floor = DedupHorizon(seqs=100).floor(high_seq=1000, high_time=T)
    assert floor == Floor(seq=900)
    assert floor.passes(900, None) and not floor.passes(899, T)


def test_a_time_horizon_trails_the_latest_event_time_not_the_clock() -> None:
    floor = DedupHorizon(time=timedelta(hours=1)).floor(high_seq=1000, high_time=T)
    assert floor == Floor(time=T - timedelta(hours=1))
    assert floor.passes(1, T - timedelta(minutes=59)) and not floor.passes(1000, T - timedelta(minutes=61))


def test_before_any_event_nothing_is_behind_the_floor() -> None:
    assert DedupHorizon(seqs=10).floor(None, None).passes(None, None)
    assert DedupHorizon(time=timedelta(1)).floor(None, None).passes(None, None)


def test_an_unknown_seq_or_time_may_be_behind_the_floor() -> None:
    assert not Floor(seq=5).passes(None, T)
    assert not Floor(time=T).passes(9, None)


def test_state_is_pruned_every_nth_batch() -> None:
    horizon = DedupHorizon(seqs=10, prune_every=5)
    assert [b for b in range(12) if horizon.prunes_after(b)] == [0, 5, 10]


def test_the_default_is_a_week_of_event_time() -> None:
    assert DEFAULT_DEDUP_HORIZON.time == timedelta(days=7)


@pytest.mark.parametrize(
    "arguments",
    [{}, {"seqs": 10, "time": timedelta(1)}, {"seqs": 0}, {"time": timedelta(0)}, {"seqs": 5, "prune_every": 0}],
)
def test_a_horizon_needs_one_positive_bound_and_a_positive_prune_interval(arguments: dict[str, object]) -> None:
    with pytest.raises(DeclarationError):
        DedupHorizon(**arguments)  # type: ignore[arg-type]
