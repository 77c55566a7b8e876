"""Running a projection: create its tables, read its topics with headers, apply micro-batches, checkpoint.

The Kafka source starts at `starting_offsets` only for a new checkpoint; afterwards the checkpoint says
where to resume. `failOnDataLoss` stays on unless the settings turn it off: offsets that vanished before
being read (retention, a deleted topic) stop the projection instead of silently leaving events out. Records
deleted before a new table's first read are not noticed by the source: a build from scratch checks each
partition's first remaining offset first (`projections.history`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

from projections.applier import BatchApplier, streaming_path
from projections.declaration import Projection
from projections.errors import ProjectionError
from projections.history import HistoryStart, check_history
from projections.kafka_clients import group_prefix, source_options
from projections.kinds.base import ensure_table
from projections.lake import Lake, has_entries
from projections.payload import ResolvedPayload
from projections.progress import read_progress
from projections.settings import Settings
from projections.txn import checkpoint_app_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from projections.metrics import ProjectionMetrics

log = logging.getLogger(__name__)


def prepare(spark: SparkSession, projection: Projection, lake: Lake) -> ResolvedPayload:
    """Resolve the payload schemas and create the projection's tables if they do not exist.

    The quarantine table is created with the first bad event, so its existence alone says there were some.
    """
    payload = projection.resolve()
    projection.kind.check_tables(spark, projection, lake)
    for path, schema in projection.kind.tables(projection, payload, lake).items():
        ensure_table(spark, path, schema, f"projection {projection.name} ({projection.kind.name})")
    projection.kind.upgrade_tables(spark, projection, payload, lake)
    return payload


def builds_from_scratch_history(
    spark: SparkSession, projection: Projection, settings: Settings, lake: Lake
) -> HistoryStart | None:
    """Where the history of a table built from scratch starts (a new checkpoint, no batch applied yet), checked
    against Kafka: RefusedError when records the build would read from earliest were deleted and the settings do
    not accept it. None when the checkpoint resumes, or events go onto a table that holds earlier ones already."""
    if has_entries(f"{lake.checkpoint(projection.name)}/offsets", spark):
        return None
    if read_progress(lake, projection.name, spark) is not None:
        return None
    return check_history(settings, projection, settings.starting_offsets, "a table built from scratch")


def start(
    spark: SparkSession,
    projection: Projection,
    settings: Settings,
    metrics: ProjectionMetrics | None = None,
) -> StreamingQuery:
    """Start the projection's streaming query and return it (runs until stopped, or drains: available_now)."""
    lake = Lake(settings.lake)
    checkpoint = lake.checkpoint(projection.name)
    history = builds_from_scratch_history(spark, projection, settings, lake)  # may refuse: nothing changed yet
    payload = prepare(spark, projection, lake)
    app_id = checkpoint_app_id(checkpoint, projection.name, spark)
    path = streaming_path(spark, projection, checkpoint)
    applier = BatchApplier(projection, payload, lake, app_id, metrics, path, history)
    subscription, topics = projection.source_option(settings.topic_template)

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option(subscription, topics)
        .option("startingOffsets", settings.starting_offsets)
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
        .option("includeHeaders", "true")
        # Its consumer groups under the projection's own prefix, which its ACLs name (bridge.kafka.acls).
        .option("groupIdPrefix", group_prefix(projection.name).rstrip("-"))
        .options(**source_options(settings))
        .options(**projection.options)
    )
    if settings.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    writer = (
        applier.source(reader.load())
        .writeStream.queryName(projection.name)
        .option("checkpointLocation", checkpoint)
        .foreachBatch(applier)
    )
    if settings.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_s} seconds")
    if metrics is not None:
        metrics.register(projection.name, deduplicates=projection.kind.dedup_horizon() is not None)
    query = writer.start()
    log.info(
        "projection started",
        extra={
            "projection": projection.name,
            "kind": projection.kind.name,
            "source": {subscription: topics},
            "table": lake.table(projection.name),
            "checkpoint": checkpoint,
            "txn_app_id": app_id,
            "query_id": str(query.id),
            "available_now": settings.available_now,
        },
    )
    return query


def run(
    spark: SparkSession,
    projection: Projection,
    settings: Settings,
    metrics: ProjectionMetrics | None = None,
) -> None:
    """Run the projection until it drains (available_now), is stopped by SIGTERM/SIGINT, or fails."""
    query = start(spark, projection, settings, metrics)
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("stopping projection", extra={"projection": projection.name, "signal": signum})
        stopping.set()

    # Signal handlers can only be installed from the main thread; elsewhere the caller stops the query.
    in_main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)} if in_main else {}
    try:
        # Poll rather than block in the JVM, so the signal handler gets to run.
        while query.isActive and not stopping.is_set():
            query.awaitTermination(1)
        if stopping.is_set():
            stop_between_batches(query)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    error = query.exception()
    if error is not None:
        raise ProjectionError(
            f"projection {projection.name} stopped on an error (restart resumes from its checkpoint): {error}"
        )
    log.info("projection stopped", extra={"projection": projection.name})


def stop_between_batches(query: StreamingQuery, timeout_s: float = 60.0) -> None:
    """Stop the query once no micro-batch is running (or after timeout_s).

    Stopping mid-batch is safe (the batch runs again on restart and its Delta writes apply once) but wastes
    the work and fills the log with the interruption.
    """
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()
