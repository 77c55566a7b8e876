"""The drains beside the ceiling run on a warmed cluster. B1's 3-broker row was measured on a cluster started a
moment before: its ceiling read 27,136 events/s before the bridge and 64,864 after it, and the bridge, timed in
between, drained at 17,177. Untimed ceiling runs on a fresh 3-broker cluster went 35,229, 33,656, 53,489, 59,748,
65,453, 98,392, 112,608 and 95,714 events/s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import backlog
from bench.backlog import Target, bridge_vs_ceiling, warm_enough
from bench.context import FULL, QUICK, Context
from bench.report.b1_throughput import warm_up_lines

FRESH_THREE_BROKERS = [35_229.0, 33_656.0, 53_489.0, 59_748.0, 65_453.0, 98_392.0, 112_608.0, 95_714.0]
#: Made up: how such a cluster settles, for the tests.
SETTLING = [104_000.0, 101_000.0, 99_000.0, 103_000.0]


def test_a_fresh_cluster_still_speeding_up_is_not_warm() -> None:
    # Runs 3 to 5 came within 15% of each other, and the cluster then went on to twice their rate.
    assert not any(warm_enough(FRESH_THREE_BROKERS[:n]) for n in range(len(FRESH_THREE_BROKERS) + 1))


def test_runs_alike_and_no_faster_than_before_are_warm() -> None:
    assert warm_enough([*FRESH_THREE_BROKERS, *SETTLING[:2]])
    assert warm_enough([213_702.0, 211_912.0, 208_000.0, 210_500.0])
    assert not warm_enough([213_702.0, 211_912.0, 208_000.0])  # nothing before them to compare with
    assert not warm_enough([213_702.0, 211_912.0, 150_000.0, 210_500.0])


class _Recorder:
    """Stands in for the ceiling, the bridge and the bare loop; records the order they ran in."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, ceilings: list[float]) -> None:
        self.calls: list[str] = []
        self._ceilings = iter(ceilings)
        monkeypatch.setattr(backlog, "ceiling", self.ceiling)
        monkeypatch.setattr(backlog, "drain", self.drain)
        monkeypatch.setattr(backlog, "read_and_produce", self.read_and_produce)

    def ceiling(self, _ctx: Context, label: str, _target: Target, events: int,
                _settings: Any = None) -> dict[str, Any]:
        self.calls.append(f"ceiling {label} {events}")
        return {"events_per_s": next(self._ceilings), "producer_settings": {}}

    def drain(self, _ctx: Context, label: str, _target: Target, events: int, _settings: Any = None,
              sample_rss: bool = False) -> backlog.DrainResult:
        self.calls.append(f"drain {label}")
        return backlog.DrainResult(events=events, rate={"events_per_s": 50_000.0, "first_record_after_s": 0.1,
                                                         "steady_s": 1.0, "wall_s": 2.0})

    def read_and_produce(self, _ctx: Context, label: str, _target: Target, _events: int,
                         _settings: Any = None) -> dict[str, Any]:
        self.calls.append(f"read-and-produce {label}")
        return {"events_per_s": 60_000.0, "read_batch_size": 1000}


def _context(tmp_path: Path, quick: bool = False) -> Context:
    return Context(run_id="r-test", quick=quick, sizes=QUICK if quick else FULL, raw_dir=tmp_path,
                   scratch=None, shared={})  # type: ignore[arg-type]


TARGET = Target("postgresql://127.0.0.1/b1", "127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094", 3, 10_000)


def test_the_cluster_is_warmed_before_the_first_timed_ceiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warming = [*FRESH_THREE_BROKERS, *SETTLING[:2]]
    recorder = _Recorder(monkeypatch, [*warming, 100_000.0, 101_000.0])
    result = bridge_vs_ceiling(_context(tmp_path), "b1-3", TARGET, 500_000)
    warm_calls = [call for call in recorder.calls if "-warm" in call]
    assert len(warm_calls) == len(warming)
    assert recorder.calls[:len(warm_calls)] == warm_calls  # every warm-up run before anything timed
    assert recorder.calls[len(warm_calls):] == ["ceiling b1-3-ceil-a 500000", "drain b1-3", "read-and-produce b1-3-rp",
                                                "ceiling b1-3-ceil-b 500000"]
    assert result["cluster_warm_up"]["settled"] is True
    assert result["cluster_warm_up"]["rates"] == warming
    assert result["ceiling"]["before_events_per_s"] == 100_000.0


def test_a_cluster_is_warmed_once_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder(monkeypatch, [100_000.0] * 20)
    ctx = _context(tmp_path)
    bridge_vs_ceiling(ctx, "b1", TARGET, 500_000)
    second = bridge_vs_ceiling(ctx, "b2", TARGET, 500_000, rounds=2)
    assert sum("-warm" in call for call in recorder.calls) == 4
    assert second["cluster_warm_up"]["earlier"] is True


def test_a_quick_run_does_not_warm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder(monkeypatch, [100_000.0] * 4)
    result = bridge_vs_ceiling(_context(tmp_path, quick=True), "b1", TARGET, 20_000)
    assert not any("-warm" in call for call in recorder.calls)
    assert result["cluster_warm_up"] == {"skipped": "not in --quick mode"}


def test_the_report_says_how_the_cluster_was_warmed() -> None:
    warm = {"events": 500_000, "rates": [35_229.0, 98_392.0, 112_608.0, 95_714.0], "seconds": 121.4,
            "settled": True, "runs_alike": 3, "spread": 0.15}
    (_, line) = warm_up_lines(warm, "3 brokers: ")
    assert line == ("3 brokers: before the timed runs, the cluster was warmed with 4 untimed ceiling runs of 500,000 "
                    "events (121.4 s), until 3 in a row came within 15% of their best and no faster than the runs "
                    "before them: 35,229, 98,392, 112,608, 95,714 events/s.")
    (_, unsettled) = warm_up_lines({**warm, "settled": False}, "3 brokers: ")
    assert "still warming" in unsettled
    assert warm_up_lines({"skipped": "not in --quick mode"}) == []
