"""Spark for B5 and B6: one shared local session, the projections under test, and a bare MERGE baseline.

The projections are the project's own (`projections.runner.start` with `LatestState` and `EventLog`).
The baseline is the least a correct projection can do: read Kafka with headers, parse the payload,
keep the latest event per key (or one per event_id), and MERGE into Delta with the seq guard. It
plays the part the bare producer plays for the bridge: the ceiling in the same run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.context import Context
from bench.workload import EVENT_TYPE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("bench.spark")

PAYLOAD_DDL = "order_id STRING NOT NULL, n BIGINT, amount_cents BIGINT, pad STRING"
KINDS = ("latest_state", "event_log")


def session(ctx: Context) -> SparkSession:
    """The run's Spark session (local[2], as the target says), built once."""
    if "spark" not in ctx.shared:
        from projections.session import build_session

        started = time.monotonic()
        ctx.shared["spark"] = build_session(app_name=f"bench-{ctx.run_id}", master="local[2]",
                                            warehouse=ctx.raw("spark-warehouse"), driver_memory="2g")
        log.info("Spark session up in %.1fs", time.monotonic() - started)
    return ctx.shared["spark"]  # type: ignore[no-any-return]


def stop_session(ctx: Context) -> None:
    spark = ctx.shared.pop("spark", None)
    if spark is not None:
        spark.stop()


@dataclass
class QueryRun:
    """How a streaming query went: wall time from start to the end of its last batch, and each batch."""

    events: int
    seconds: float
    batches: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        durations = [b["seconds"] for b in self.batches if b["rows"]]
        busy = sum(durations)
        return {
            "events": self.events,
            "seconds": round(self.seconds, 2),
            "events_per_s": round(self.events / self.seconds, 1) if self.seconds else 0.0,
            "batches": len(durations),
            "batch_seconds": {"min": round(min(durations, default=0), 2), "max": round(max(durations, default=0), 2),
                              "mean": round(busy / len(durations), 2) if durations else 0.0},
            "events_per_s_in_batches": round(self.events / busy, 1) if busy else 0.0,
        }


#: The parts of a micro-batch that Spark's progress reports (`durationMs`), in the order they happen: finding
#: the new offsets, writing them to the offset log (the WAL), planning, getting the batch, running the sink
#: (foreachBatch), and writing the commit log. `triggerExecution` is the whole.
PROGRESS_PHASES = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets")


def batches_of(query: StreamingQuery) -> list[dict[str, Any]]:
    """Each micro-batch: rows, total seconds, the seconds inside foreachBatch (`addBatch`), and Spark's own
    split of the batch (`PROGRESS_PHASES`, seconds)."""
    return [{"batch": p["batchId"], "rows": p["numInputRows"],
             "seconds": p["durationMs"].get("triggerExecution", 0) / 1000,
             "apply_seconds": p["durationMs"].get("addBatch", 0) / 1000,
             "phases": {name: p["durationMs"].get(name, 0) / 1000 for name in PROGRESS_PHASES}}
            for p in query.recentProgress]


#: What Delta records of each MERGE (`DESCRIBE HISTORY`, operationMetrics), as milliseconds and counts.
MERGE_METRICS = ("executionTimeMs", "scanTimeMs", "rewriteTimeMs", "numTargetFilesRemoved", "numTargetFilesAdded",
                 "numTargetRowsUpdated", "numTargetRowsInserted", "numSourceRows")


def merge_metrics(spark: SparkSession, table: Path) -> list[dict[str, int]]:
    """Delta's own metrics of every MERGE into `table`, oldest first: where the MERGE spent its time (the
    scan that finds the touched files, the rewrite) and how many files it rewrote."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where("operation = 'MERGE'").orderBy("version")
    return [{name: int(row["operationMetrics"].get(name, 0) or 0) for name in MERGE_METRICS}
            for row in history.select("operationMetrics").collect()]


def drain(query: StreamingQuery, events: int, started: float, timeout: float = 1800) -> QueryRun:
    """Wait for an availableNow query to finish; raise what it failed with."""
    query.awaitTermination(int(timeout))
    if query.isActive:
        query.stop()
        raise TimeoutError(f"streaming query {query.name} did not finish within {timeout:.0f}s")
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"streaming query {query.name} failed: {error}")
    return QueryRun(events, time.monotonic() - started, batches_of(query))


# ------------------------------------------------------------------------------------ warming the JVM up

WARM_UP_EVENTS = 10_000


def fill(ctx: Context, name: str, events: int, keys: int) -> str:
    """A topic `<name>.order` of `events` benchmark records over `keys` keys, written by the bare producer."""
    from bench.backlog import PARTITIONS
    from bench.bridge_process import bridge_env
    from bench.ceiling import run_ceiling
    from bench.stack import KAFKA1
    from bench.workload import AGGREGATE_TYPE

    topic = ctx.scratch.create_topic(KAFKA1, f"{name}.{AGGREGATE_TYPE}", PARTITIONS, 1)
    env = bridge_env("sqlite:///unused.db", KAFKA1, "bench-fill", "unused.{aggregate_type}", 1)
    produced = run_ceiling(env, topic, events, keys, prefix=name)
    log.info("%d events over %d keys in %s (%.0f events/s)", events, keys, topic, produced["events_per_s"])
    return topic


def warm_up(ctx: Context, per_batch: int | None = None) -> None:
    """Run each kind's projection and bare MERGE once, untimed, on a small topic, the first time a run needs
    Spark (B5, or B6 without B5): a cold JVM's first stream costs about 2.5 times a warm one's CPU, and the
    side timed first would pay for both. Not in --quick."""
    import shutil

    from bench.stack import KAFKA1

    if ctx.quick or ctx.shared.get("spark_warm"):
        return
    spark = session(ctx)
    topic = fill(ctx, "spark-warm", WARM_UP_EVENTS, WARM_UP_EVENTS)
    template = ctx.scratch.topic("spark-warm.{aggregate_type}")
    lake = ctx.raw("lake-warm")
    try:
        for kind in KINDS:
            # A table of its own: the projection's is `<lake>/warm_<kind>`, with the kind's schema.
            warm = start_baseline(spark, kind, lake / f"warm_baseline_{kind}", lake / f"_cp_warm_baseline_{kind}",
                                  KAFKA1, topic, per_batch)
            drain(warm, WARM_UP_EVENTS, time.monotonic())
            warm = start_projection(spark, kind, f"warm_{kind}", lake, KAFKA1, template, available_now=True,
                                    max_per_batch=per_batch)
            drain(warm, WARM_UP_EVENTS, time.monotonic())
    finally:
        shutil.rmtree(lake, ignore_errors=True)
    ctx.shared["spark_warm"] = True


# ------------------------------------------------------------------------------------ the projections


def projection(kind: str, name: str) -> Any:
    """The project's projection of the benchmark events for one kind."""
    from projections import EventLog, LatestState, Projection

    kinds = {"latest_state": LatestState, "event_log": EventLog}
    return Projection(name=name, kind=kinds[kind](), event_types={EVENT_TYPE: PAYLOAD_DDL},
                      aggregate_types=("order",), description=f"benchmark {kind}")


def start_projection(spark: SparkSession, kind: str, name: str, lake: Path, bootstrap: str, topic_template: str,
                     available_now: bool, max_per_batch: int | None = None, trigger_s: float = 1.0,
                     change_feed: bool = False) -> StreamingQuery:
    """Create the projection's tables (optionally with Delta's change feed on), then start its query."""
    from projections import runner
    from projections.lake import Lake
    from projections.settings import Settings

    declared = projection(kind, name)
    settings = Settings(bootstrap_servers=bootstrap, lake=str(lake), topic_template=topic_template,
                        starting_offsets="earliest", max_offsets_per_trigger=max_per_batch,
                        trigger_interval_s=trigger_s, available_now=available_now, metrics_port=0)
    runner.prepare(spark, declared, Lake(settings.lake))
    if change_feed:
        spark.sql(f"ALTER TABLE delta.`{Lake(settings.lake).table(name)}` "
                  "SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    return runner.start(spark, declared, settings)


# ------------------------------------------------------------------------------------- the baseline


def _decoded(raw: DataFrame, as_logged: bool) -> DataFrame:
    """The envelope and the payload's columns; `as_logged` adds what an `event_log` row keeps besides them, the
    raw payload and the headers beyond the standard five, so the baseline writes rows as wide as the kind's."""
    from pyspark.sql import functions as F

    from projections.envelope import STANDARD_HEADERS

    headers = F.map_from_entries(F.col("headers"))
    standard = ", ".join(f"'{h}'" for h in STANDARD_HEADERS)
    logged = [
        F.col("value").cast("string").alias("payload"),
        F.expr(f"transform(filter(coalesce(headers, array()), h -> h.key NOT IN ({standard})), "
               "h -> named_struct('key', h.key, 'value', CAST(h.value AS STRING)))").alias("headers"),
    ] if as_logged else []
    return raw.select(
        F.col("key").cast("string").alias("aggregate_id"),
        headers["event_id"].cast("string").alias("event_id"),
        headers["event_type"].cast("string").alias("event_type"),
        headers["seq"].cast("string").cast("long").alias("seq"),
        F.to_timestamp(headers["occurred_at"].cast("string")).alias("occurred_at"),
        F.from_json(F.col("value").cast("string"), PAYLOAD_DDL).alias("p"),
        *logged,
    ).select("aggregate_id", "event_id", "event_type", "seq", "occurred_at", "p.*",
             *(["payload", "headers"] if as_logged else []))


_BASELINE_DDL = ("aggregate_id STRING, event_id STRING, event_type STRING, seq BIGINT, occurred_at TIMESTAMP, "
                 f"{PAYLOAD_DDL.replace(' NOT NULL', '')}")
#: An `event_log` row keeps the raw payload and the extra headers too.
_LOGGED_DDL = ", payload STRING, headers ARRAY<STRUCT<key: STRING, value: STRING>>"


def start_baseline(spark: SparkSession, kind: str, table: Path, checkpoint: Path, bootstrap: str, topic: str,
                   max_per_batch: int | None = None, trigger_s: float | None = None,
                   change_feed: bool = False) -> StreamingQuery:
    """The bare foreachBatch MERGE with the seq guard (latest_state) or the event_id guard (event_log, writing
    rows as wide as the kind's); availableNow unless `trigger_s` asks for a processing-time trigger."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    as_logged = kind == "event_log"
    columns = _BASELINE_DDL + (_LOGGED_DDL if as_logged else "")
    spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{table}` ({columns}) USING delta")
    if change_feed:
        spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")

    def apply(raw: DataFrame, batch_id: int) -> None:
        events = _decoded(raw, as_logged)
        target = DeltaTable.forPath(spark, str(table)).alias("t")
        if kind == "latest_state":
            newest = Window.partitionBy("aggregate_id").orderBy(F.col("seq").desc())
            source = events.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1").drop("_rank")
            (target.merge(source.alias("s"), "t.aggregate_id = s.aggregate_id")
             .whenMatchedUpdateAll(condition="s.seq > t.seq").whenNotMatchedInsertAll().execute())
        else:
            source = events.dropDuplicates(["event_id"])
            target.merge(source.alias("s"), "t.event_id = s.event_id").whenNotMatchedInsertAll().execute()

    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("includeHeaders", "true"))
    if max_per_batch is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_batch))
    writer = (reader.load().writeStream.queryName(f"baseline_{kind}").option("checkpointLocation", str(checkpoint))
              .foreachBatch(apply))
    if trigger_s is None:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=f"{trigger_s} seconds").start()


# ------------------------------------------------------------------------------- per-batch profile


class _Phases(logging.Handler):
    """Collects the per-step seconds of each batch the projection applies (its "batch applied" log line)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.batches: list[dict[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        phases = getattr(record, "phases", None)
        rows: int = getattr(record, "rows", 0)
        if record.getMessage() == "batch applied" and isinstance(phases, dict) and rows:
            self.batches.append(dict(phases))


@contextmanager
def applier_phases() -> Iterator[list[dict[str, float]]]:
    handler = _Phases()
    logger = logging.getLogger("projections.applier")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.batches
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 3) if values else 0.0


def profile(projection: list[dict[str, Any]], baseline: list[dict[str, Any]], applier: list[dict[str, float]],
            merges: dict[str, list[dict[str, int]]]) -> dict[str, Any]:
    """Where a batch's time goes, as the mean seconds per batch with rows, for the projection and the bare
    MERGE: Spark's split of the micro-batch, the projection's own steps inside foreachBatch, and Delta's
    metrics of the MERGE (the scan that finds the files to touch, the rewrite, files rewritten)."""

    def spark_split(batches: list[dict[str, Any]]) -> dict[str, float]:
        busy = [b for b in batches if b["rows"]]
        split = {name: _mean([b["phases"][name] for b in busy]) for name in PROGRESS_PHASES}
        split["triggerExecution"] = _mean([b["seconds"] for b in busy])
        return split

    def merge_split(metrics: list[dict[str, int]]) -> dict[str, float]:
        return {
            "merges": len(metrics),
            "execution_s": _mean([m["executionTimeMs"] / 1000 for m in metrics]),
            "scan_s": _mean([m["scanTimeMs"] / 1000 for m in metrics]),
            "rewrite_s": _mean([m["rewriteTimeMs"] / 1000 for m in metrics]),
            "files_removed": _mean([float(m["numTargetFilesRemoved"]) for m in metrics]),
            "files_added": _mean([float(m["numTargetFilesAdded"]) for m in metrics]),
        }

    steps = sorted({name for batch in applier for name in batch})
    return {
        "spark": {"projection": spark_split(projection), "baseline": spark_split(baseline)},
        "applier": {name: _mean([batch.get(name, 0.0) for batch in applier]) for name in steps},
        "merge": {side: merge_split(metrics) for side, metrics in merges.items()},
    }
