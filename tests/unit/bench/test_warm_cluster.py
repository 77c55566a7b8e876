"""The drains beside the ceiling run on a warmed cluster. B1's 3-broker row was measured on a cluster started a
moment before: its ceiling read 27,136 events/s before the bridge and 64,864 after it, and the bridge, timed in
between, drained at 17,177."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import backlog
from bench.backlog import Target, WarmUpRun, bridge_vs_ceiling, warm_enough
from bench.context import FULL, QUICK, Context
from bench.report.b1_throughput import warm_up_lines

#: Untimed ceiling runs of 500,000 events on a 3-broker cluster started just before: rate, seconds, and the CPU
#: seconds the four JVMs' JIT compilers used meanwhile (`jstat -compiler`).
FRESH_THREE_BROKERS = [
    WarmUpRun(27_988.0, 23.5, 31.63), WarmUpRun(43_362.0, 16.3, 17.63), WarmUpRun(44_149.0, 16.9, 12.58),
    WarmUpRun(47_479.0, 15.8, 11.88), WarmUpRun(62_049.0, 12.9, 8.71), WarmUpRun(85_408.0, 10.3, 3.35),
    WarmUpRun(94_146.0, 9.8, 1.17), WarmUpRun(76_448.0, 11.3, 3.07),
]
#: The same on the warm 1-broker cluster.
WARM_ONE_BROKER = [WarmUpRun(176_513.0, 7.1, 0.07), WarmUpRun(195_390.0, 6.6, 0.16)]
#: Another fresh 3-broker cluster's rates: alike from the second run on, then twice as fast three minutes later.
PLATEAU = [29_875.0, 52_756.0, 49_918.0, 45_876.0, 51_529.0]


def test_a_fresh_cluster_is_warm_once_its_jit_has_done_the_produce_path() -> None:
    firsts = [warm_enough(FRESH_THREE_BROKERS[:n]) for n in range(len(FRESH_THREE_BROKERS) + 1)]
    assert firsts.index(True) == 7  # after the seventh run, whose JIT took 0.12 of a core
    assert warm_enough(WARM_ONE_BROKER)


def test_one_run_is_never_enough() -> None:
    assert not warm_enough(WARM_ONE_BROKER[:1])


def test_without_the_jits_figures_rates_alike_and_no_faster_than_before_decide() -> None:
    def runs(rates: list[float]) -> list[WarmUpRun]:
        return [WarmUpRun(rate, 10.0, None) for rate in rates]

    # Rates alike are not enough by themselves: PLATEAU's last three are within 15%, but there is nothing before
    # them at the same pace to say the cluster stopped speeding up...
    assert not warm_enough(runs(PLATEAU[:4]))
    assert warm_enough(runs([213_702.0, 211_912.0, 208_000.0, 210_500.0]))
    assert not warm_enough(runs([213_702.0, 211_912.0, 208_000.0]))
    assert not warm_enough(runs([213_702.0, 211_912.0, 150_000.0, 210_500.0]))


class _Recorder:
    """Stands in for the ceiling, the bridge and the bare loop; records the order they ran in."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, ceilings: list[float], jit: list[float] | None = None,
                 seconds: list[float] | None = None) -> None:
        self.calls: list[str] = []
        self._ceilings = iter(ceilings)
        self._jit = iter(jit or [])
        self._seconds = iter(seconds or [])
        self.now = 1000.0
        monkeypatch.setattr(backlog, "jit_seconds", lambda _bootstrap: next(self._jit, None))
        monkeypatch.setattr(backlog, "time", SimpleNamespace(monotonic=lambda: self.now))
        monkeypatch.setattr(backlog, "ceiling", self.ceiling)
        monkeypatch.setattr(backlog, "drain", self.drain)
        monkeypatch.setattr(backlog, "read_and_produce", self.read_and_produce)

    def ceiling(self, _ctx: Context, label: str, _target: Target, events: int,
                _settings: Any = None) -> dict[str, Any]:
        self.calls.append(f"ceiling {label} {events}")
        self.now += next(self._seconds, 10.0)
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
    warming = [run.events_per_s for run in FRESH_THREE_BROKERS[:7]]
    jit = [0.0]
    for run in FRESH_THREE_BROKERS[:7]:  # before and after each run
        jit += [jit[-1] + (run.jit_s or 0.0)] * 2
    recorder = _Recorder(monkeypatch, [*warming, 100_000.0, 101_000.0], jit[:-1],
                         [run.seconds for run in FRESH_THREE_BROKERS[:7]])
    result = bridge_vs_ceiling(_context(tmp_path), "b1-3", TARGET, 500_000)
    warm_calls = [call for call in recorder.calls if "-warm" in call]
    assert len(warm_calls) == len(warming)
    assert recorder.calls[:len(warm_calls)] == warm_calls  # every warm-up run before anything timed
    assert recorder.calls[len(warm_calls):] == ["ceiling b1-3-ceil-a 500000", "drain b1-3", "read-and-produce b1-3-rp",
                                                "ceiling b1-3-ceil-b 500000"]
    assert result["cluster_warm_up"]["settled"] is True
    assert result["cluster_warm_up"]["rates"] == warming
    assert result["cluster_warm_up"]["jit_shares"][-1] == round(1.17 / 9.8, 3)
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
    warm = {"events": 500_000, "rates": [27_988.0, 85_408.0, 94_146.0], "jit_shares": [1.346, 0.325, 0.119],
            "seconds": 121.4, "settled": True, "jit_share_at_most": 0.2, "runs_alike": 3, "spread": 0.15}
    (_, line) = warm_up_lines(warm, "3 brokers: ")
    assert line == ("3 brokers: before the timed runs, the cluster was warmed with 3 untimed ceiling runs of 500,000 "
                    "events (121.4 s), until its JIT compilers used at most 20% of a core in a run: 27,988, 85,408, "
                    "94,146 events/s; the JIT's share of a core in each: 1.35, 0.33, 0.12.")
    (_, by_rates) = warm_up_lines({**warm, "jit_shares": [None, None, None]}, "3 brokers: ")
    assert "until 3 in a row came within 15% of their best and no faster than the runs before them" in by_rates
    (_, gap) = warm_up_lines({**warm, "jit_shares": [1.346, None, 0.119]}, "3 brokers: ")
    assert gap.endswith("the JIT's share of a core in each: 1.35, ?, 0.12.")
    (_, unsettled) = warm_up_lines({**warm, "settled": False}, "3 brokers: ")
    assert "still warming" in unsettled
    assert warm_up_lines({"skipped": "not in --quick mode"}) == []


def test_b3_says_whether_it_warmed_the_broker_or_found_it_warm(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import b3_latency
    from bench.stack import KAFKA1

    _Recorder(monkeypatch, [210_000.0, 205_000.0, 208_000.0, 211_000.0] * 3)
    monkeypatch.setattr(b3_latency, "latency_run", lambda *_args, **_kwargs: {"latency_ms": {"p99": 1.0}})

    def b3(ctx: Context) -> dict[str, Any]:
        ctx.scratch = SimpleNamespace(database=lambda name: f"postgresql://127.0.0.1/bench_{name}")  # type: ignore[assignment]
        return b3_latency.run(ctx)["cluster_warm_up"]

    ctx = _context(tmp_path)
    done = b3(ctx)
    assert done == ctx.shared["warmed_clusters"][KAFKA1]
    assert done["rates"] == [210_000.0, 205_000.0, 208_000.0, 211_000.0]
    found_warm = b3(ctx)  # B1 or an earlier B3 warmed it in this run
    assert found_warm["earlier"] is True
    assert "warmed earlier in this run" in warm_up_lines(found_warm, "1 broker: ")[1]
    assert b3(_context(tmp_path, quick=True)) == {"skipped": "not in --quick mode"}


def test_the_jit_seconds_are_summed_over_the_clusters_jvms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import stack

    for node, pid in (("node-0", "101"), ("node-1", "102")):
        (tmp_path / "kafka3" / node).mkdir(parents=True)
        (tmp_path / "kafka3" / node / "broker.pid").write_text(f"{pid}\n")
    answers = {"101": "Compiled Failed Invalid   Time   FailedType FailedMethod\n    9609      1       0    31.63"
                      "          1 java/util/jar/JarFile getEntry\n",
               "102": "Compiled Failed Invalid   Time   FailedType FailedMethod\n    1738      0       0    17.62"
                      "          0\n"}

    def jstat(args: list[str], **_kwargs: Any) -> SimpleNamespace:
        pid = args[-1]
        return SimpleNamespace(returncode=0 if pid in answers else 1, stdout=answers.get(pid, ""))

    monkeypatch.setattr(stack, "RUN_DIR", tmp_path)
    monkeypatch.setattr(stack.subprocess, "run", jstat)
    assert stack.jit_seconds(stack.KAFKA3) == pytest.approx(49.25)
    assert stack.jit_seconds("127.0.0.1:9999") is None  # not a cluster of this stack
    (tmp_path / "kafka3" / "node-1" / "broker.pid").write_text("103\n")  # a JVM that is gone
    assert stack.jit_seconds(stack.KAFKA3) is None
