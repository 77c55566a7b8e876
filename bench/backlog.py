"""Draining a loaded backlog: the bridge's throughput beside the bare-producer ceiling, in the same run.

The ceiling is measured just before and just after the bridge, on topics shaped like the bridge's
(same partitions, replication and settings), so drift on the shared machine shows as the spread
between the two. The bridge's rate is taken from the topic itself: records acknowledged per second
between the first record and the last.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import bridge_process
from bench.bridge_process import BridgeProcess, bridge_env, thread_shares
from bench.ceiling import run_ceiling
from bench.context import Context
from bench.read_produce import run_read_produce
from bench.stack import jit_seconds
from bench.topics import TopicWatch
from bench.workload import AGGREGATE_TYPE, PAYLOAD_BYTES

log = logging.getLogger("bench.backlog")

PARTITIONS = 6  # the bridge's default BRIDGE_TOPIC_PARTITIONS


@dataclass(frozen=True)
class Target:
    """Where the bridge reads and writes for one measurement."""

    db_url: str
    bootstrap: str
    replication: int
    keys: int = 10_000


@dataclass
class DrainResult:
    events: int
    rate: dict[str, float]
    rss_samples: list[tuple[float, int]] = field(default_factory=list)
    rate_samples: list[tuple[float, int]] = field(default_factory=list)
    profile: Path | None = None
    profile_seconds: float = 0.0
    #: Each thread's CPU as a share of one core while records arrived (`bench.bridge_process.thread_shares`).
    thread_cpu: dict[str, float] = field(default_factory=dict)

    @property
    def events_per_s(self) -> float:
        return self.rate["events_per_s"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "events_per_s": round(self.events_per_s, 1),
            "payload_mb_per_s": round(self.events_per_s * PAYLOAD_BYTES / 1e6, 2),
            "steady_s": round(self.rate["steady_s"], 2),
            "wall_s": round(self.rate["wall_s"], 2),
            "first_record_after_s": round(self.rate.get("first_record_after_s", 0.0), 2),
            "peak_rss_mb": round(max((r for _, r in self.rss_samples), default=0) / 2**20, 1),
            "thread_cpu": self.thread_cpu,
        }


def drain(ctx: Context, label: str, target: Target, events: int, settings: dict[str, str | int] | None = None,
          sample_rss: bool = False, profile: bool = False, committed: bool = False) -> DrainResult:
    """Start a bridge with a fresh name (watermark 0) on target and time it over the first `events` events
    (`committed`: counted as a read_committed consumer may read them, `TopicWatch`)."""
    ctx.scratch.create_topic(target.bootstrap, f"{label}.{AGGREGATE_TYPE}", PARTITIONS, target.replication)
    template = ctx.scratch.topic(f"{label}.{{aggregate_type}}")
    env = bridge_env(target.db_url, target.bootstrap, f"bench-{label}", template, target.replication,
                     **(settings or {}))
    watch = TopicWatch(target.bootstrap, ctx.scratch.topic(f"{label}.{AGGREGATE_TYPE}"), committed=committed)
    bridge = BridgeProcess(env, ctx.raw(f"logs/bridge-{label}.log"), sample=True).start()
    if profile:
        time.sleep(1.5)  # skip interpreter start-up and imports
    spy = _start_profiler(bridge.pid, ctx.raw(f"profiles/{label}.txt")) if profile else None
    spy_started = time.monotonic()
    spy_seconds = 0.0
    try:
        progress = watch.wait_for(events, timeout=max(600, events / 500), started_at=bridge.started_at,
                                  check=bridge.check_running)
    finally:
        if spy is not None:
            spy_seconds = time.monotonic() - spy_started
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            spy.wait(60)
        bridge.stop()
        watch.close()
    started = progress.started_at
    rate = progress.rate()
    first = started + rate.get("first_record_after_s", 0.0)
    return DrainResult(
        events=events,
        rate=rate,
        rss_samples=bridge.sampler.samples if bridge.sampler and sample_rss else [],
        thread_cpu=thread_shares(bridge.sampler.threads, first, first + rate["steady_s"]) if bridge.sampler else {},
        rate_samples=[(round(t - started, 2), n) for t, n in progress.samples],
        profile=ctx.raw(f"profiles/{label}.txt") if profile else None,
        profile_seconds=spy_seconds,
    )


def round_robin(ctx: Context, prefix: str, variants: dict[str, tuple[Target, dict[str, str | int]]], events: int,
                rounds: int, after: Callable[[str, DrainResult], None] | None = None,
                committed: bool = False) -> dict[str, list[float]]:
    """Drain each variant once per round, in turn, so slow spells of the shared machine spread over all of them:
    each variant's events/s per round (`after` sees every drain's result as it ends)."""
    rates: dict[str, list[float]] = {}
    for round_number in range(1, rounds + 1):
        for index, (name, (target, settings)) in enumerate(variants.items()):
            result = drain(ctx, f"{prefix}{round_number}-{index}", target, events, settings, committed=committed)
            rates.setdefault(name, []).append(result.events_per_s)
            if after is not None:
                after(name, result)
            log.info("%s round %d %-36s %7.0f events/s", prefix, round_number, name, result.events_per_s)
    return rates


def variant_rows(rates: dict[str, list[float]], shown: dict[str, dict[str, Any]], baseline: str,
                 fraction: str) -> dict[str, dict[str, Any]]:
    """Each round-robin variant's mean rate, the range of its rounds, and its mean as a fraction (key `fraction`) of
    the `baseline` variant's; `shown` gives the settings each row records."""
    base = sum(rates[baseline]) / len(rates[baseline])
    rows = {}
    for name, settings in shown.items():
        mean = sum(rates[name]) / len(rates[name])
        rows[name] = {"settings": settings, "bridge_events_per_s": round(mean, 1),
                      "bridge_range": [round(min(rates[name])), round(max(rates[name]))],
                      fraction: round(mean / base, 3), "microseconds_per_event": round(1e6 / mean, 1)}
    return rows


def ceiling(ctx: Context, label: str, target: Target, events: int,
            settings: dict[str, str | int] | None = None) -> dict[str, Any]:
    """The bare producer with the bridge's settings for target, on a fresh topic of the same shape."""
    topic = ctx.scratch.create_topic(target.bootstrap, f"{label}.ceiling", PARTITIONS, target.replication)
    env = bridge_env(target.db_url, target.bootstrap, f"bench-{label}", "unused.{aggregate_type}",
                     target.replication, **(settings or {}))
    result = run_ceiling(env, topic, events, target.keys)
    if result["acked"] != events:
        raise RuntimeError(f"ceiling {label}: {result['acked']} of {events} records acknowledged")
    return result


def read_and_produce(ctx: Context, label: str, target: Target, events: int,
                     settings: dict[str, str | int] | None = None) -> dict[str, Any]:
    """The bare read-and-produce loop (`bench.read_produce`) over the same backlog, on a fresh topic."""
    topic = ctx.scratch.create_topic(target.bootstrap, f"{label}.read-produce", PARTITIONS, target.replication)
    env = bridge_env(target.db_url, target.bootstrap, f"bench-{label}", "unused.{aggregate_type}",
                     target.replication, **(settings or {}))
    result = run_read_produce(env, topic, events)
    if result["acked"] != events:
        raise RuntimeError(f"read-and-produce {label}: {result['acked']} of {events} records acknowledged")
    return result


#: A cluster is warm once its JVMs' JIT compilers used at most this share of one core during an untimed ceiling run:
#: the brokers then run their produce path compiled. A fresh 3-broker cluster's JIT took 1.35 cores in the first
#: run, 0.33 in the sixth and 0.03 to 0.27 after it; a warm broker's, 0.01 to 0.02 (`bench/analysis.md`).
WARM_JIT_SHARE = 0.2
#: Without the JIT's figures (a cluster this stack did not start): warm once the last `WARM_RUNS` ceiling runs came
#: within `WARM_SPREAD` of their best, and that best is no more than `WARM_SPREAD` above the runs before them.
WARM_RUNS = 3
WARM_SPREAD = 0.15
#: At most this long warming one cluster; a cluster that has not settled by then is measured as it is (said so).
WARM_MAX_S = 300.0
#: Events per warm-up run, at most: a few seconds each on a warm cluster.
WARM_EVENTS = 500_000


@dataclass(frozen=True, slots=True)
class WarmUpRun:
    """One untimed ceiling run: its rate, how long it took, and the CPU seconds the cluster's JIT used meanwhile."""

    events_per_s: float
    seconds: float
    jit_s: float | None

    @property
    def jit_share(self) -> float | None:
        """The JIT's CPU during the run, as a share of one core."""
        return None if self.jit_s is None else self.jit_s / max(self.seconds, 1e-9)


def warm_enough(runs: list[WarmUpRun]) -> bool:
    """Whether the untimed ceiling `runs` so far show a warm cluster. The first run pays for the JVMs' start-up, so
    it is never enough; after it, the last run's JIT share decides (`WARM_JIT_SHARE`). Rates alone are a poor sign:
    a fresh 3-broker cluster went 29,875, 52,756, 49,918, 45,876, 51,529 events/s, and on to 120,604 three
    minutes later; they decide only where the JIT's figures are missing."""
    if len(runs) < 2:
        return False
    share = runs[-1].jit_share
    if share is not None:
        return share <= WARM_JIT_SHARE
    rates = [run.events_per_s for run in runs]
    if len(rates) <= WARM_RUNS:
        return False
    last, before = rates[-WARM_RUNS:], rates[:-WARM_RUNS]
    return min(last) >= (1 - WARM_SPREAD) * max(last) and max(last) <= (1 + WARM_SPREAD) * max(before)


def warm_cluster(ctx: Context, label: str, target: Target, events: int) -> dict[str, Any]:
    """Untimed ceiling runs on target's cluster until `warm_enough` (or `WARM_MAX_S`), once per cluster and run.

    A freshly started broker runs its produce path interpreted until the JIT has compiled it, which on these two
    cores also takes CPU from everything else: the first ceiling and the bridge after it would measure the
    warm-up, and the second ceiling a warm cluster (B1's 3 brokers: 27,136 before the bridge, 64,864 after it).
    What was done is returned for the report."""
    warmed: dict[str, dict[str, Any]] = ctx.shared.setdefault("warmed_clusters", {})
    if target.bootstrap in warmed:
        return {"earlier": True, **warmed[target.bootstrap]}
    if ctx.quick:
        return {"skipped": "not in --quick mode"}
    per_run = min(events, WARM_EVENTS)
    started = time.monotonic()
    runs: list[WarmUpRun] = []
    while not warm_enough(runs) and time.monotonic() - started < WARM_MAX_S:
        jit_before, run_started = jit_seconds(target.bootstrap), time.monotonic()
        rate = ceiling(ctx, f"{label}-warm{len(runs) + 1}", target, per_run)["events_per_s"]
        jit_after = jit_seconds(target.bootstrap)
        jit = None if jit_before is None or jit_after is None else jit_after - jit_before
        runs.append(WarmUpRun(rate, time.monotonic() - run_started, jit))
        log.info("%s: warming the cluster, untimed ceiling %.0f events/s, the JIT at %s of a core", label, rate,
                 "?" if runs[-1].jit_share is None else f"{runs[-1].jit_share:.2f}")
    done = {"events": per_run, "rates": [round(run.events_per_s, 1) for run in runs],
            "jit_shares": [None if run.jit_share is None else round(run.jit_share, 3) for run in runs],
            "seconds": round(time.monotonic() - started, 1), "settled": warm_enough(runs),
            "jit_share_at_most": WARM_JIT_SHARE, "runs_alike": WARM_RUNS, "spread": WARM_SPREAD}
    warmed[target.bootstrap] = done
    return done


def bridge_vs_ceiling(ctx: Context, label: str, target: Target, events: int,
                      settings: dict[str, str | int] | None = None, sample_rss: bool = False,
                      plain_too: bool = False, rounds: int = 1) -> dict[str, Any]:
    """Ceiling, bridge, ceiling: the bridge's rate as a fraction of the mean of the two ceilings. On PostgreSQL
    and SQLite also the bare read-and-produce loop, between the bridge and the second ceiling. With `plain_too`, in
    a run whose bridge runs its core compiled, the bridge again with the core as plain Python, right after it.

    With several `rounds` (the whole sequence again, each on its own topics), the result is the round whose
    fraction of the ceiling is the median, with every round's figures beside it (`rounds`): on this shared
    machine one round's ceiling moved by a third between its two measurements. RSS is sampled in the first.

    The cluster is warmed first (`warm_cluster`), unless this run has already done so."""
    warm_up = warm_cluster(ctx, label, target, events)
    if rounds == 1:
        return {**_bridge_vs_ceiling(ctx, label, target, events, settings, sample_rss, plain_too),
                "cluster_warm_up": warm_up}
    done = [_bridge_vs_ceiling(ctx, f"{label}-r{i + 1}", target, events, settings, sample_rss and i == 0, plain_too)
            for i in range(rounds)]
    median = sorted(done, key=lambda r: r["fraction_of_ceiling"])[len(done) // 2]
    summary = [{
        "bridge_events_per_s": r["bridge"]["events_per_s"],
        "ceiling_before_events_per_s": r["ceiling"]["before_events_per_s"],
        "ceiling_after_events_per_s": r["ceiling"]["after_events_per_s"],
        "fraction_of_ceiling": r["fraction_of_ceiling"],
        **({"plain_python_events_per_s": r["bridge_plain_python"]["events_per_s"]}
           if "bridge_plain_python" in r else {}),
        **({"read_and_produce_events_per_s": r["read_and_produce"]["events_per_s"]} if "read_and_produce" in r else {}),
    } for r in done]
    return {**median, "rounds": summary, "_rss_samples": done[0]["_rss_samples"], "cluster_warm_up": warm_up}


def _bridge_vs_ceiling(ctx: Context, label: str, target: Target, events: int, settings: dict[str, str | int] | None,
                       sample_rss: bool, plain_too: bool) -> dict[str, Any]:
    before = ceiling(ctx, f"{label}-ceil-a", target, events, settings)
    log.info("%s: ceiling before %.0f events/s", label, before["events_per_s"])
    bridge = drain(ctx, label, target, events, settings, sample_rss=sample_rss)
    log.info("%s: bridge %.0f events/s", label, bridge.events_per_s)
    plain = None
    if plain_too and bridge_process.INSTALLED is not None:
        with bridge_process.plain_python():
            plain = drain(ctx, f"{label}-plain", target, events, settings)
        log.info("%s: bridge, core as plain Python %.0f events/s", label, plain.events_per_s)
    bare_loop = None
    if target.db_url.startswith(("postgresql", "sqlite")):
        bare_loop = read_and_produce(ctx, f"{label}-rp", target, events, settings)
        log.info("%s: read-and-produce %.0f events/s", label, bare_loop["events_per_s"])
    after = ceiling(ctx, f"{label}-ceil-b", target, events, settings)
    log.info("%s: ceiling after %.0f events/s", label, after["events_per_s"])
    mean_ceiling = (before["events_per_s"] + after["events_per_s"]) / 2
    loop_figures = {} if bare_loop is None else {
        "read_and_produce": {"events_per_s": round(bare_loop["events_per_s"], 1),
                             "read_batch_size": bare_loop["read_batch_size"]},
        "fraction_of_read_and_produce": round(bridge.events_per_s / bare_loop["events_per_s"], 3),
    }
    plain_figures = {} if plain is None else {
        "bridge_plain_python": {"events_per_s": round(plain.events_per_s, 1),
                                "fraction_of_ceiling": round(plain.events_per_s / mean_ceiling, 3)},
    }
    return {
        **loop_figures,
        **plain_figures,
        "bridge": bridge.as_dict(),
        "ceiling": {
            "events_per_s": round(mean_ceiling, 1),
            "payload_mb_per_s": round(mean_ceiling * PAYLOAD_BYTES / 1e6, 2),
            "before_events_per_s": round(before["events_per_s"], 1),
            "after_events_per_s": round(after["events_per_s"], 1),
            "producer_settings": before["producer_settings"],
        },
        "fraction_of_ceiling": round(bridge.events_per_s / mean_ceiling, 3),
        "settings": settings or {},
        "_rss_samples": bridge.rss_samples,
        "_rate_samples": bridge.rate_samples,
    }


def _start_profiler(pid: int, output: Path) -> subprocess.Popen[bytes] | None:
    """py-spy attached to the bridge (raw collapsed stacks); None when py-spy is not installed."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        log.warning("py-spy is not installed (pip install py-spy); skipping the profile")
        return None
    output.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--nonblocking",
                             "--output", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
