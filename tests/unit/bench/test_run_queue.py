"""The bridge's main thread is sampled for the time it waited for a core, beside its CPU: on two cores shared with
three brokers it waited 45 to 52% of a drain, which its CPU share alone (45 to 51%) showed as idleness."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.bridge_process import RUN_QUEUE, thread_cpu, thread_shares
from bench.report import b1_throughput
from bench.report.cells import Plots


def test_the_main_threads_wait_for_a_core_is_sampled_with_the_threads_cpu() -> None:
    first = thread_cpu(os.getpid())
    assert first[RUN_QUEUE] >= 0.0  # this process's own, from /proc/<pid>/task/<pid>/schedstat
    later = thread_cpu(os.getpid())
    shares = thread_shares([(0.0, first), (1.0, later)], 0.0, 1.0)
    assert set(shares) <= set(later)
    assert thread_cpu(2**22 + 7) == {}  # no such process: nothing, not a run-queue figure alone


def _b1(thread_cpu_shares: dict[str, float]) -> dict[str, Any]:
    variant = {
        "bridge": {"events": 500_000, "events_per_s": 30_000.0, "payload_mb_per_s": 15.0, "wall_s": 18.0,
                   "thread_cpu": thread_cpu_shares},
        "ceiling": {"events_per_s": 90_000.0, "before_events_per_s": 90_000.0, "after_events_per_s": 90_000.0,
                    "payload_mb_per_s": 46.0, "producer_settings": {}},
        "fraction_of_ceiling": 0.333,
        "meets_target": False,
    }
    return {"benchmarks": {"B1": {"backlog": {"events": 1_000_000, "payload_bytes": 512, "keys": 10_000,
                                              "load_seconds": 10.0, "loaded_with": "COPY"},
                                  "variants": {"3 brokers": variant}}}}


def test_the_report_says_how_long_the_main_thread_waited_for_a_core() -> None:
    text = b1_throughput.section(_b1({"main": 0.45, "rdk:broker1": 0.08, RUN_QUEUE: 0.52}), Plots({}, Path(".")))
    line = next(line for line in text.splitlines() if line.startswith("The bridge's CPU by thread (3 brokers"))
    assert "main 45%, rdk:broker1 8%." in line  # not listed among the threads
    assert line.endswith("The main thread also waited for a core (runnable, in the run queue) 52% of the time.")


def test_a_run_without_the_figure_says_nothing_of_it() -> None:
    text = b1_throughput.section(_b1({"main": 0.93, "rdk:broker1": 0.18}), Plots({}, Path(".")))
    assert "waited for a core" not in text
