"""The projections `make demo` runs beside the bridge: order events, current orders and events per minute.

`DemoProjection` starts the example projections on one topic inside the demo's process, and answers how
many events and live orders the tables hold so the demo can show them filling.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from projections import runner
from projections.errors import ProjectionError
from projections.examples import order_events, order_events_per_minute, orders_current
from projections.lake import Lake
from projections.readers import live_rows
from projections.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

DEMO_PROJECTIONS = (order_events, orders_current, order_events_per_minute)
# Spark's warnings to a file, errors only to the terminal: see the file's own comment.
LOG_CONFIG = Path(__file__).resolve().parent / "demo-log4j2.properties"


class DemoProjection:
    """The example projections over one topic, as background streaming queries in a local Spark."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        lake: str | Path,
        trigger_interval_s: float = 3.0,
        spark_log: Path | None = None,
    ) -> None:
        self.settings = Settings(
            bootstrap_servers=bootstrap_servers,
            lake=str(lake),
            trigger_interval_s=trigger_interval_s,
            metrics_port=0,
        )
        self.lake = Lake(str(lake))
        self.projections = [
            dataclasses.replace(p, aggregate_types=(), topics=(topic,)) for p in DEMO_PROJECTIONS
        ]
        self.spark_log = spark_log
        self.spark: SparkSession | None = None
        self.queries: list[StreamingQuery] = []

    def start(self) -> None:
        """Start Spark and the projections; with `spark_log`, Spark logs there and prints only errors."""
        from projections.session import build_session

        extra_conf = {}
        if self.spark_log is not None:
            # Read when the driver JVM starts, which in a plain Python process is this session's creation.
            extra_conf["spark.driver.extraJavaOptions"] = (
                f'"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}" "-Doutbox.demo.spark.log={self.spark_log}"'
            )
        self.spark = build_session(app_name="outbox-demo", shuffle_partitions=2, extra_conf=extra_conf)
        for projection in self.projections:
            self.queries.append(runner.start(self.spark, projection, self.settings))

    def _check(self) -> SparkSession:
        if self.spark is None:
            raise ProjectionError("the demo projections are not started")
        for query in self.queries:
            error = query.exception()
            if error is not None:
                raise ProjectionError(f"demo projection {query.name} failed: {error}")
        return self.spark

    def event_count(self) -> int:
        """Events in the order_events log (0 before its first batch)."""
        spark = self._check()
        return int(spark.read.format("delta").load(self.lake.table(self.projections[0].name)).count())

    def order_count(self) -> int:
        """Orders in orders_current that are not cancelled (tombstones excluded)."""
        spark = self._check()
        return int(live_rows(spark, self.projections[1], self.lake).count())

    def show(self) -> None:
        """Print current orders and per-minute counts, once every projection has caught up with Kafka."""
        for query in self.queries:
            query.processAllAvailable()
        spark = self._check()
        print("orders_current (live rows, newest first):")
        live_rows(spark, self.projections[1], self.lake).drop("field_seqs", "deleted_seq").orderBy(
            "seq", ascending=False
        ).show(10, truncate=False)
        print("order_events_per_minute:")
        live_rows(spark, self.projections[2], self.lake).orderBy("window_start", "event_type").show(
            20, truncate=False
        )

    def stop(self) -> None:
        for query in self.queries:
            runner.stop_between_batches(query, timeout_s=30)
        self.queries.clear()
        if self.spark is not None:
            self.spark.stop()
            self.spark = None
