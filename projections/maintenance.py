"""Upkeep of a projection's tables: compact small files, purge expired tombstones, vacuum old files."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Final

from projections.declaration import Projection
from projections.lake import Lake
from projections.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Delta's own safety floor: files younger than this may still be read by a running query or time travel.
DEFAULT_RETAIN_HOURS: Final = 168


def maintain(
    spark: SparkSession,
    projection: Projection,
    lake: Lake,
    retain_hours: int = DEFAULT_RETAIN_HOURS,
    purge_tombstones: bool = True,
) -> dict[str, Any]:
    """Purge expired tombstones, OPTIMIZE (compact) and VACUUM each of the projection's tables; report it."""
    from delta.tables import DeltaTable

    if retain_hours < DEFAULT_RETAIN_HOURS:
        # Delta refuses shorter retention unless its check is off; only an explicit request gets here.
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    payload = projection.resolve()
    paths = [*projection.kind.tables(projection, payload, lake), lake.quarantine(projection.name)]
    report: dict[str, Any] = {"projection": projection.name, "tables": {}}
    for path in paths:
        if not DeltaTable.isDeltaTable(spark, path):
            continue
        done: dict[str, Any] = {}
        condition = projection.kind.purge_condition()
        if purge_tombstones and condition and path == lake.table(projection.name):
            before = DeltaTable.forPath(spark, path).toDF().where(condition).count()
            if before:
                DeltaTable.forPath(spark, path).delete(condition)
            done["tombstones_purged"] = before
        metrics = spark.sql(f"OPTIMIZE delta.`{path}`").select(
            "metrics.numFilesAdded", "metrics.numFilesRemoved"
        )
        row = metrics.first()
        done["files_added"], done["files_removed"] = (int(row[0]), int(row[1])) if row else (0, 0)
        _vacuum(spark, path, retain_hours)
        done["vacuumed_retain_hours"] = retain_hours
        report["tables"][path] = done
        log.info("table maintained", extra={"projection": projection.name, "table": path, **done})
    return report


def maintain_command(projection: Projection, settings: Settings, retain_hours: int, purge_tombstones: bool) -> int:
    """`outbox-projections maintain NAME`: maintain the projection's tables in a Spark session of its own and
    print the report."""
    from projections.session import build_session

    spark = build_session(app_name=f"projection-maintain-{projection.name}")
    try:
        report = maintain(spark, projection, Lake(settings.lake), retain_hours, purge_tombstones)
    finally:
        spark.stop()
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def _vacuum(spark: SparkSession, path: str, retain_hours: int) -> None:
    # VACUUM lists the table's files in parallelPartitionDiscovery.parallelism tasks (10,000 by default):
    # minutes of empty tasks on a small driver. A few tasks per core lists any table this size quickly.
    key = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    previous = spark.conf.get(key, None)
    spark.conf.set(key, str(max(8, 4 * spark.sparkContext.defaultParallelism)))
    try:
        spark.sql(f"VACUUM delta.`{path}` RETAIN {int(retain_hours)} HOURS")
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)
