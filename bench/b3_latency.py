"""B3: commit-to-ack latency under steady writers at several rates.

Commit time: time.time() right after the writer's autocommitted INSERT returns (its COMMIT is done).
Delivery time: the broker's LogAppendTime of the record (the topic is created with
message.timestamp.type=LogAppendTime), which is when the leader appended it, a fraction of a
millisecond before the ack reaches the bridge on loopback; it has millisecond resolution. No
consumer runs during the measurement: the topic is read back afterwards, so consumer latency is not
in the numbers.
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path
from typing import Any

from bench.backlog import PARTITIONS, WARM_EVENTS, Target, warm_cluster
from bench.bridge_process import BridgeProcess, bridge_env
from bench.context import Context
from bench.stack import KAFKA1, pg_dsn
from bench.targets import B3_P99_MS, B3_RATE
from bench.topics import TIMESTAMP_LOG_APPEND_TIME, TopicWatch, VisibleTimes, header, read_all
from bench.workload import AGGREGATE_TYPE
from bench.writer import Schedule, WriterProcess, read_commits

log = logging.getLogger("bench.b3")

COMMITTED = "time.time() when the writer's transaction has committed (its autocommitted INSERT returned)"
WARM_UP_S = 1.0
KEYS = 10_000


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "p999": at(0.999), "max": ordered[-1],
            "mean": sum(ordered) / len(ordered)}


def latency_run(ctx: Context, label: str, rate: int, seconds: float, settings: dict[str, str | int] | None = None,
                visible: bool = False, cpu: bool = False) -> dict[str, Any]:
    """One steady-rate run: writers -> PostgreSQL -> bridge -> Kafka; latency per event from the topic, and with
    `visible` also from its commit to when a read_committed consumer reading along got it (`VisibleTimes`). With
    `cpu`, also the cores the bridge process and its PostgreSQL sessions used while the writers ran."""
    url = ctx.scratch.database(label.replace("-", "_"))
    # A broker started a moment ago answers slower until its JIT is done: B3 first on a fresh stack measured a p99
    # of 24 ms at 1,000/s, B3-tuning right after it 4.1 ms (r1206212619). Once a run; B1 has done it in a full one.
    warm_cluster(ctx, label, Target(url, KAFKA1, 1, KEYS), WARM_EVENTS)
    topic = ctx.scratch.create_topic(KAFKA1, f"{label}.{AGGREGATE_TYPE}", PARTITIONS, 1,
                                     {"message.timestamp.type": "LogAppendTime"})
    env = bridge_env(url, KAFKA1, f"bench-{label}", ctx.scratch.topic(f"{label}.{{aggregate_type}}"), 1,
                     **(settings or {}))
    reader = VisibleTimes(KAFKA1, topic, PARTITIONS) if visible else None
    bridge = BridgeProcess(env, ctx.raw(f"logs/bridge-{label}.log")).start()
    try:
        bridge.wait_leading()
        span = _cpu_span(bridge, url) if cpu else None
        schedule = Schedule.for_rate(rate, seconds)
        records = ctx.raw(f"commits/{label}.txt")
        writer = WriterProcess(pg_dsn(url.rsplit("/", 1)[1]), label, KEYS, schedule, records)
        written = writer.wait(timeout=seconds * 10 + 120)
        cores = _cores(span.stop()) if span is not None else None
        if reader is not None:
            reader.wait_for(written["events"], timeout=300)
        else:
            watch = TopicWatch(KAFKA1, topic)
            try:
                watch.settle(written["events"], bridge.watermark, head=written["events"])
            finally:
                watch.close()
    finally:
        bridge.stop()
        seen = reader.stop() if reader is not None else None
    result = {"offered_rate": rate, "writer": written, **commit_to_append(topic, records, label)}
    if seen is not None:
        result["visible_ms"] = commit_to_visible(seen, records)
    if cores is not None:
        result["cpu_cores"] = cores
    return result


def _cpu_span(bridge: BridgeProcess, url: str) -> Any:
    from bench.b8_debezium import CpuSpan, bridge_backends  # B8's samplers; imported only when asked for

    return CpuSpan(lambda: bridge.pid, bridge_backends(url))


def _cores(used: tuple[float, float, float]) -> dict[str, float]:
    """The cores the bridge process and its PostgreSQL sessions used over the span (`CpuSpan.stop`)."""
    bridge, database, wall = used
    return {"bridge": round(bridge / wall, 3), "database": round(database / wall, 3)}


def commit_to_visible(seen: dict[int, float], records: Path) -> dict[str, float]:
    """Each event's latency from its commit to when the read_committed reader got it, after the warm-up."""
    commits = read_commits(records)
    first_commit = min(commits.values())
    latencies_ms = [(seen[index] - committed) * 1000 for index, committed in commits.items()
                    if index in seen and committed - first_commit >= WARM_UP_S]
    return {k: round(v, 1) for k, v in percentiles(latencies_ms).items()}


def commit_to_append(topic: str, records: Path, label: str) -> dict[str, Any]:
    """Each event's latency from its commit (the writer's record file) to its record's LogAppendTime."""
    commits = read_commits(records)
    first_commit = min(commits.values())
    latencies_ms: list[float] = []
    published: set[int] = set()
    for msg in read_all(KAFKA1, topic):
        kind, appended_ms = msg.timestamp()
        index = int((header(msg, "event_id") or b"-0").decode().rsplit("-", 1)[1])
        published.add(index)
        committed = commits.get(index)
        if kind != TIMESTAMP_LOG_APPEND_TIME or committed is None or committed - first_commit < WARM_UP_S:
            continue
        latencies_ms.append(appended_ms - committed * 1000)
    stats = {k: round(v, 1) for k, v in percentiles(latencies_ms).items()}
    lost = sorted(set(commits) - published)
    return {
        "latency_ms": stats,
        "events_measured": len(latencies_ms),
        "lost": len(lost),
        "lost_examples": [f"{label}-{n:010d}" for n in lost[:10]],
        "_histogram": _histogram(latencies_ms),
    }


def _histogram(values: list[float]) -> list[tuple[float, int]]:
    """Counts in log-spaced latency buckets (ms), for the plot."""
    edges = [0.5 * 1.25**i for i in range(60)]
    counts = [0] * len(edges)
    for value in values:
        counts[min(len(edges) - 1, bisect.bisect_left(edges, value))] += 1
    return [(round(edge, 2), n) for edge, n in zip(edges, counts, strict=True) if n]


def run(ctx: Context) -> dict[str, Any]:
    rates: dict[str, Any] = {}
    # Here rather than left to the first `latency_run`, so that the report says how it went.
    warm_up = warm_cluster(ctx, "b3", Target(ctx.scratch.database("b3_warm"), KAFKA1, 1, KEYS), WARM_EVENTS)
    for rate in ctx.sizes.b3_rates:
        log.info("B3: %d events/s for %.0fs", rate, ctx.sizes.b3_seconds)
        rates[str(rate)] = latency_run(ctx, f"b3-{rate}", rate, ctx.sizes.b3_seconds)
        log.info("B3: %d events/s -> %s", rate, rates[str(rate)]["latency_ms"])
    result: dict[str, Any] = {
        "target": f"p99 <= {B3_P99_MS:.0f} ms at {B3_RATE:,} events/s",
        "measured_from": COMMITTED,
        "measured_to": "broker LogAppendTime of the record (ms resolution); no consumer in the path",
        "warm_up_excluded_s": WARM_UP_S,
        "rates": rates,
        "cluster_warm_up": warm_up,
    }
    at_target = rates.get(str(B3_RATE), {}).get("latency_ms", {})
    if at_target:
        result["meets_target"] = at_target["p99"] <= B3_P99_MS
    return result
