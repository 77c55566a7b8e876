"""B6: end to end at a steady rate: writer COMMIT -> bridge -> Kafka -> projection -> row visible in Delta.

The pipeline runs as in production: steady writers (8 connections, one event per transaction) into
PostgreSQL, `outbox-bridge run` as a process, and the `latest_state` projection as a streaming query
(processing-time trigger) in the shared Spark session. Visibility is read afterwards from the table's
change data feed (enabled on the table before the stream starts): an event is visible at the
`_commit_timestamp` of the first table version whose row for its key carries its seq or a later one.
The topic has LogAppendTime, which splits each latency into its bridge and projection parts. The
same pipeline then runs again with the bare MERGE baseline (`bench.spark_jobs`) in place of the
projection: the floor that Spark and Delta set on this machine.

Before either, the projection's pipeline runs once for `WARM_PIPELINE_S`, untimed: whichever pipeline ran
first was about 1 s slower at p50 than when it ran second (both orders tried, `bench/analysis.md`), so
without it the order, not the code, decided the comparison. Its latencies are kept beside the results.
"""

from __future__ import annotations

import bisect
import json
import logging
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg

from bench.b3_latency import COMMITTED, percentiles
from bench.backlog import PARTITIONS
from bench.bridge_process import BridgeProcess, bridge_env
from bench.context import Context
from bench.spark_jobs import (
    applier_phases,
    batches_of,
    merge_metrics,
    profile,
    session,
    start_baseline,
    start_projection,
    warm_up,
)
from bench.stack import KAFKA1, pg_dsn
from bench.targets import B6_AIM_S, B6_TARGET_S
from bench.topics import TIMESTAMP_LOG_APPEND_TIME, header, partition_ends, read_all
from bench.workload import AGGREGATE_TYPE
from bench.writer import Schedule, WriterProcess, read_commits

log = logging.getLogger("bench.b6")

TARGET_P50_S, TARGET_P99_S = B6_TARGET_S
AIM_P50_S, AIM_P99_S = B6_AIM_S
TRIGGER_S = 1.0
WARM_UP_S = 3.0
#: How long the untimed first pipeline runs (see the module's docstring).
WARM_PIPELINE_S = 60.0
KEYS = 10_000
NAME = "bench_e2e"
BASELINE_NAME = "baseline_e2e"


def _caught_up(query: Any, topic: str) -> bool:
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return False
    end = progress["sources"][0].get("endOffset")
    offsets = json.loads(end) if isinstance(end, str) else (end or {})
    done = {int(p): int(o) for p, o in offsets.get(topic, {}).items()}
    return all(done.get(p, 0) >= last for p, last in partition_ends(KAFKA1, topic).items())


def run(ctx: Context) -> dict[str, Any]:
    # A JVM warmed by B5 stays warm; without B5 in the run, warm it here, or the projection (timed first) pays
    # the JIT's warm-up and the baseline after it does not.
    warm_up(ctx)
    warm = None if ctx.quick else pipeline(ctx, "b6-warm", baseline=False, seconds=WARM_PIPELINE_S)
    result = pipeline(ctx, "b6", baseline=False)
    if warm is not None:
        result["warm_pipeline"] = {"seconds": WARM_PIPELINE_S, "latency_s": warm["latency_s"],
                                   "batches": warm["batches"]}
    result["jvm_warmed_first"] = bool(ctx.shared.get("spark_warm"))
    baseline = pipeline(ctx, "b6-base", baseline=True)
    result["baseline"] = {key: baseline[key] for key in ("latency_s", "commit_to_kafka_s", "kafka_to_delta_s",
                                                         "batches", "writer", "events_measured")}
    result["_baseline_batches"] = baseline.pop("_batches")
    result["profile"] = profile(result["_batches"], result["_baseline_batches"], result.pop("_phases"),
                                {"projection": result.pop("_merges"), "baseline": baseline.pop("_merges")})
    return result


def pipeline(ctx: Context, label: str, baseline: bool, seconds: float | None = None) -> dict[str, Any]:
    """One live pipeline run: writers, bridge, topic, and the projection (or the bare MERGE baseline), for
    `seconds` (the run's B6 size unless given)."""
    rate, seconds = ctx.sizes.b6_rate, seconds or ctx.sizes.b6_seconds
    spark = session(ctx)
    lake = ctx.raw(f"lake-{label}")
    table = lake / (BASELINE_NAME if baseline else NAME)
    url = ctx.scratch.database(label.replace("-", "_"))
    topic = ctx.scratch.create_topic(KAFKA1, f"{label}.{AGGREGATE_TYPE}", PARTITIONS, 1,
                                     {"message.timestamp.type": "LogAppendTime"})
    template = ctx.scratch.topic(f"{label}.{{aggregate_type}}")
    bridge = BridgeProcess(bridge_env(url, KAFKA1, f"bench-{label}", template, 1),
                           ctx.raw(f"logs/bridge-{label}.log")).start()
    query = None
    phases: list[dict[str, float]] = []
    try:
        bridge.wait_leading()
        if baseline:
            query = start_baseline(spark, "latest_state", table, lake / "_cp_baseline", KAFKA1, topic,
                                   trigger_s=TRIGGER_S, change_feed=True)
        else:
            query = start_projection(spark, "latest_state", NAME, lake, KAFKA1, template, available_now=False,
                                     trigger_s=TRIGGER_S, change_feed=True)
        commits_file = ctx.raw(f"commits/{label}.txt")
        with applier_phases() as phases:
            writer = WriterProcess(pg_dsn(url.rsplit("/", 1)[1]), label, KEYS, Schedule.for_rate(rate, seconds),
                                   commits_file)
            written = writer.wait(timeout=seconds * 10 + 120)
            deadline = time.monotonic() + 300
            while not _caught_up(query, topic) and time.monotonic() < deadline:
                if query.exception() is not None:
                    raise RuntimeError(f"the projection failed: {query.exception()}")
                time.sleep(0.5)
    finally:
        batches = batches_of(query) if query is not None else []
        if query is not None:
            query.stop()
        bridge.stop()
    try:
        result = _analyse(ctx, url, topic, table, written, read_commits(commits_file))
        durations = [b["seconds"] for b in batches if b["rows"]]
        result["batches"] = {"count": len(durations), "max_s": round(max(durations, default=0), 2),
                             "mean_s": round(sum(durations) / max(1, len(durations)), 2),
                             "first_s": durations[0] if durations else None}
        result["_batches"] = batches
        result["_phases"] = phases
        result["_merges"] = merge_metrics(spark, table)
        return result
    finally:
        shutil.rmtree(lake, ignore_errors=True)


def _analyse(ctx: Context, url: str, topic: str, table: Path, written: dict[str, Any],
             commits: dict[int, float]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    spark = session(ctx)
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, str(table)).history().select("version", "operation").collect()
    enabled_at = min(int(h["version"]) for h in history if h["operation"] == "SET TBLPROPERTIES")
    versions: dict[str, list[tuple[int, float]]] = defaultdict(list)
    changes = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", enabled_at)
               .load(str(table)).where(F.col("_change_type").isin("insert", "update_postimage"))
               .select("aggregate_id", "seq", F.col("_commit_timestamp").cast("double").alias("visible")).collect())
    for row in changes:
        versions[row["aggregate_id"]].append((int(row["seq"]), float(row["visible"])))
    for rows in versions.values():
        rows.sort()
    appended: dict[int, float] = {}
    for msg in read_all(KAFKA1, topic):
        kind, stamp = msg.timestamp()
        if kind == TIMESTAMP_LOG_APPEND_TIME:
            appended[int((header(msg, "event_id") or b"-0").decode().rsplit("-", 1)[1])] = stamp / 1000
    with psycopg.connect(pg_dsn(url.rsplit("/", 1)[1])) as conn:
        events = conn.execute("SELECT event_id, seq, aggregate_id FROM domain_events").fetchall()
    first_commit = min(commits.values())
    total, bridge_part, projection_part = [], [], []
    invisible = lost = 0
    for event_id, seq, aggregate_id in events:
        index = int(event_id.rsplit("-", 1)[1])
        committed = commits.get(index)
        if committed is None or committed - first_commit < WARM_UP_S:
            continue
        rows = versions.get(aggregate_id, [])
        at = bisect.bisect_left(rows, (seq, float("-inf")))
        # The first version (in time) whose row for this key is at or past this event's seq.
        visible = min((t for _, t in rows[at:]), default=None)
        if visible is None:
            if index in appended:
                invisible += 1
            else:
                lost += 1
            continue
        total.append(visible - committed)
        if index in appended:
            bridge_part.append(appended[index] - committed)
            projection_part.append(visible - appended[index])

    def seconds(values: list[float]) -> dict[str, float]:
        return {k: round(v, 3) for k, v in percentiles(values).items()}

    stats = seconds(total)
    return {
        "target": f"p50 <= {TARGET_P50_S:.0f} s, p99 <= {TARGET_P99_S:.0f} s at {ctx.sizes.b6_rate:,} events/s "
                  f"(aim p50 <= {AIM_P50_S:.0f} s, p99 <= {AIM_P99_S:.0f} s)",
        "writer": written,
        "trigger_interval_s": TRIGGER_S,
        "projection": "latest_state (projections framework), processing-time trigger",
        "measured_from": COMMITTED,
        "measured_to": "_commit_timestamp of the first Delta version whose row for the key has seq >= the event's",
        "warm_up_excluded_s": WARM_UP_S,
        "latency_s": stats,
        "commit_to_kafka_s": seconds(bridge_part),
        "kafka_to_delta_s": seconds(projection_part),
        "events_measured": len(total),
        "events_not_visible": invisible,
        "events_never_published": lost,
        "meets_target": bool(stats) and stats["p50"] <= TARGET_P50_S and stats["p99"] <= TARGET_P99_S,
    }
