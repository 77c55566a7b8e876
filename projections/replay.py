"""Replaying a projection from a chosen point in its topics.

`projections.starting_point` parses `--from-offset`, `projections.offset_search` finds it in Kafka, and
`projections.new_table` builds a new table beside the live one and switches the live one over to it (the
default). `in_place` replays into the live table instead: reset the checkpoint, every kind is idempotent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from projections.declaration import Projection
from projections.lake import Lake, delete_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def reset_in_place(spark: SparkSession, projection: Projection, lake: Lake, rebuild: bool) -> bool:
    """Delete the live checkpoint (a new txnAppId comes with the next), and with `rebuild` the table too."""
    removed = delete_path(lake.checkpoint(projection.name), spark)
    if rebuild:
        for path in (lake.table(projection.name), lake.staging(projection.name), lake.progress(projection.name)):
            delete_path(path, spark)
    return removed
