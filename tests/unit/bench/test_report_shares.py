"""`docs/BENCHMARKS.md` states each share of the ceiling beside the verdict on it. Rounded to a whole per cent,
a share just under a goal read as the goal itself: r1207064439's B2 gave 0.397 and the summary said "got 40%;
#33's goal, >= 40%: MISSED"."""

from __future__ import annotations

from typing import Any

from bench.report import b1_throughput, b2_sqlite
from bench.targets import B1_ONE_BROKER_FRACTION, B2_GOAL_FRACTION


def _backlog(fraction: float) -> dict[str, Any]:
    ceiling = 200_000.0
    return {
        "bridge": {"events": 500_000, "events_per_s": ceiling * fraction, "payload_mb_per_s": 40.0, "wall_s": 7.0},
        "ceiling": {"events_per_s": ceiling, "before_events_per_s": ceiling, "after_events_per_s": ceiling,
                    "payload_mb_per_s": 100.0},
        "fraction_of_ceiling": fraction,
        "meets_target": False,
    }


def test_a_b2_share_just_under_its_goal_does_not_read_as_the_goal() -> None:
    (row,) = b2_sqlite.summary({"B2": _backlog(B2_GOAL_FRACTION - 0.003)})
    assert "got 39.7%" in row
    assert "40%: **MISSED**" in row


def test_a_b1_share_just_under_its_goal_does_not_read_as_the_goal() -> None:
    (row,) = b1_throughput.summary({"B1": {"variants": {"1 broker": _backlog(B1_ONE_BROKER_FRACTION - 0.004)}}})
    assert "got 64.6%" in row
    assert ">= 65%: **MISSED**" in row
