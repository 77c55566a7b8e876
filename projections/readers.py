"""Reading projections: what readers should see (no tombstones), as DataFrames or temporary views."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from projections.declaration import Projection
from projections.lake import Lake

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def live_rows(spark: SparkSession, projection: Projection, lake: Lake) -> DataFrame:
    """The projection's table as readers should see it: latest_state and fold rows without tombstones."""
    table = spark.read.format("delta").load(lake.table(projection.name))
    return projection.kind.live_rows(table)


def register_views(spark: SparkSession, projections: Iterable[Projection], lake: Lake) -> list[str]:
    """Create a temporary view per projection, named after it, over its live rows; return the names."""
    names = []
    for projection in projections:
        live_rows(spark, projection, lake).createOrReplaceTempView(projection.name)
        names.append(projection.name)
    return names
