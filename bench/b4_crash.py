"""B4: crash cost. kill -9 the bridge repeatedly while a writer keeps committing; count lost and duplicates.

A crash loses nothing and re-sends at most the in-flight window plus what was acknowledged since the
last persist of the watermark: bound = BRIDGE_MAX_IN_FLIGHT + (peak acks per second x
BRIDGE_PERSIST_INTERVAL_S). The writer uses one connection, so commits arrive in seq order and any
lost event here comes from crash handling alone (concurrent writers are B3's). After each kill the
persisted watermark W is where the next instance resumes; an extra copy of seq s is charged to the
latest crash with W < s.
"""

from __future__ import annotations

import logging
import random
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.backlog import PARTITIONS
from bench.bridge_process import BridgeProcess, bridge_env
from bench.context import Context
from bench.stack import KAFKA1, pg_dsn
from bench.topics import TopicWatch, header, read_all
from bench.workload import AGGREGATE_TYPE
from bench.writer import Schedule, WriterProcess, read_commits

log = logging.getLogger("bench.b4")

MAX_IN_FLIGHT = 10_000  # the bridge's default, set explicitly so the bound is what was run
PERSIST_INTERVAL_S = 1.0
LEASE_TIMEOUT_S = 3  # a restarted instance waits this long for the killed one's lease to expire
KEYS = 10_000


def run_for(check: Callable[[], None], watch: TopicWatch, seconds: float, samples: list[tuple[float, int]]
            ) -> None:
    """Let the relay work for `seconds`, sampling the topic's count every 0.2 s; `check` raises if it died."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        check()
        samples.append((time.monotonic(), watch.count()))
        time.sleep(0.2)


def _acks_in_last_second(samples: list[tuple[float, int]]) -> int:
    now, count = samples[-1]
    before = next((c for t, c in reversed(samples) if now - t >= 1.0), samples[0][1])
    return count - before


def run(ctx: Context) -> dict[str, Any]:
    crashes, rate = ctx.sizes.b4_crashes, ctx.sizes.b4_rate
    url = ctx.scratch.database("b4")
    topic = ctx.scratch.create_topic(KAFKA1, f"b4.{AGGREGATE_TYPE}", PARTITIONS, 1)
    env = bridge_env(url, KAFKA1, "bench-b4", ctx.scratch.topic("b4.{aggregate_type}"), 1,
                     BRIDGE_MAX_IN_FLIGHT=MAX_IN_FLIGHT, BRIDGE_PERSIST_INTERVAL_S=PERSIST_INTERVAL_S,
                     BRIDGE_LEASE_TIMEOUT_S=LEASE_TIMEOUT_S)
    commits_file = ctx.raw("commits/b4.txt")
    writer = WriterProcess(pg_dsn(url.rsplit("/", 1)[1]), "b4", KEYS,
                           Schedule.for_rate(rate, 3600, max_tx_per_s=100, writers=1), commits_file)
    watch = TopicWatch(KAFKA1, topic)
    rng = random.Random(4)
    samples: list[tuple[float, int]] = []
    kills: list[dict[str, Any]] = []
    epoch = 0
    bridge: BridgeProcess | None = None
    try:
        for number in range(1, crashes + 1):
            bridge = BridgeProcess(env, ctx.raw(f"logs/bridge-b4-{number:02d}.log")).start()
            epoch = bridge.wait_leading(after_epoch=epoch, timeout=60)
            resumed_from = bridge.watermark()
            ran = rng.uniform(2.0, 5.0)
            run_for(bridge.check_running, watch, ran, samples)
            acks_last_second = _acks_in_last_second(samples)
            bridge.kill()
            kills.append({"crash": number, "resumed_from": resumed_from, "ran_s": round(ran, 2),
                          "acks_in_last_second": acks_last_second, "watermark_after_kill": bridge.watermark()})
            log.info("B4: crash %d/%d after %.1fs, watermark %d", number, crashes, ran,
                     kills[-1]["watermark_after_kill"])
        bridge = BridgeProcess(env, ctx.raw("logs/bridge-b4-final.log")).start()
        bridge.wait_leading(after_epoch=epoch, timeout=60)
        writer.interrupt()
        written = writer.wait(timeout=120)
        watch.settle(None, bridge.watermark, head=written["events"], timeout=600)
    finally:
        if writer.process.poll() is None:
            writer.interrupt()
            writer.process.wait(60)
        if bridge is not None:
            bridge.stop()
        watch.close()
    return _analyse(kills, written, samples, read_commits(commits_file), topic)


def _analyse(kills: list[dict[str, Any]], written: dict[str, Any], samples: list[tuple[float, int]],
             commits: dict[int, float], topic: str) -> dict[str, Any]:
    copies: Counter[int] = Counter()
    published: set[int] = set()
    for msg in read_all(KAFKA1, topic):
        copies[int(header(msg, "seq") or b"0")] += 1
        published.add(int((header(msg, "event_id") or b"-0").decode().rsplit("-", 1)[1]))
    resume_points = [k["watermark_after_kill"] for k in kills]
    per_crash = [0] * len(kills)
    unattributed = 0
    for seq, count in copies.items():
        if count > 1:
            index = bisect_left(resume_points, seq) - 1  # the latest crash whose watermark is below seq
            if index >= 0:
                per_crash[index] += count - 1
            else:
                unattributed += count - 1
    peak_rate = max((b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(samples, samples[5:], strict=False)
                    if b[0] > a[0]) if len(samples) > 5 else 0.0
    bound = MAX_IN_FLIGHT + int(peak_rate * PERSIST_INTERVAL_S)
    for kill, duplicates in zip(kills, per_crash, strict=True):
        kill["duplicates"] = duplicates
    lost = sorted(set(commits) - published)
    return {
        "target": "lost = 0; duplicates per crash within max_in_flight + acks per persist interval",
        "crashes": len(kills),
        "writer": written,
        "settings": {"BRIDGE_MAX_IN_FLIGHT": MAX_IN_FLIGHT, "BRIDGE_PERSIST_INTERVAL_S": PERSIST_INTERVAL_S,
                     "BRIDGE_LEASE_TIMEOUT_S": LEASE_TIMEOUT_S},
        "lost": len(lost),
        "lost_examples": [f"b4-{n:010d}" for n in lost[:10]],
        "records": sum(copies.values()),
        "duplicates_total": sum(per_crash) + unattributed,
        "duplicates_unattributed": unattributed,
        "duplicates_per_crash": {"mean": round(sum(per_crash) / max(1, len(per_crash)), 1), "max": max(per_crash,
                                                                                                        default=0)},
        "peak_acks_per_s": round(peak_rate),
        "bound": bound,
        "meets_target": not lost and max(per_crash, default=0) <= bound,
        "kills": kills,
    }
