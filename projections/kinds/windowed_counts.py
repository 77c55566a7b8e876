"""`windowed_counts`: events per tumbling window of `occurred_at` and per dimension, exact under replays.

Counting by adding each batch's counts would count a replayed event twice. Instead each batch first adds
its events to a staging set of distinct event ids (`<lake>/_staging/<name>`, MERGE insert-when-not-matched),
then recounts, from that set, every (window, dimensions) the batch touched and MERGEs those counts into
the table. A duplicate or a replay touches a window without changing its count.

The staging set is kept within a deduplication horizon of event time (`horizon`, 7 days by default): a
window that ends at or before the horizon's floor is closed. Its staged ids are pruned every
`horizon.prune_every` batches, and an event that falls in a closed window is refused (logged and counted,
never applied): its window can no longer be recounted, and adding to it could count a duplicate twice.
The horizon is by time only, as a window closes by time; a seq horizon is refused at declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from projections.errors import DeclarationError
from projections.horizon import DEFAULT_DEDUP_HORIZON, DedupHorizon, Floor
from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import insert_new
from projections.payload import ResolvedPayload

if TYPE_CHECKING:
    from projections.lake import Lake

DIMENSIONS: Final = ("event_type", "aggregate_type")


@dataclass(frozen=True)
class WindowedCounts(Kind):
    """Counts per tumbling `window` (a Spark interval such as "1 minute") and per dimension."""

    name = "windowed_counts"
    lost_by_a_later_start = "every window before it, and part of the count of the window it falls in"
    window: str = "1 minute"
    dimensions: tuple[str, ...] = DIMENSIONS
    horizon: DedupHorizon = DEFAULT_DEDUP_HORIZON

    def validate(self, projection: Declaration) -> None:
        if self.horizon.time is None:
            raise DeclarationError(
                f"projection {projection.name} (windowed_counts): the dedup horizon must be a time "
                "(DedupHorizon(time=...)), as a window closes by time; got a horizon of "
                f"{self.horizon.describe()}"
            )
        unknown = sorted(set(self.dimensions) - set(DIMENSIONS))
        if unknown or not self.dimensions:
            raise DeclarationError(
                f"projection {projection.name} (windowed_counts): dimensions must be a non-empty subset of "
                f"{list(DIMENSIONS)}, got {list(self.dimensions)}"
            )

    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        return StructType(
            [
                StructField("window_start", TimestampType(), False),
                StructField("window_end", TimestampType(), False),
                *[StructField(d, StringType(), True) for d in self.dimensions],
                StructField("count", LongType(), False),
            ]
        )

    def staging_schema(self) -> StructType:
        return StructType(
            [
                StructField("event_id", StringType(), False),
                StructField("seq", LongType(), False),
                StructField("window_start", TimestampType(), False),
                StructField("window_end", TimestampType(), False),
                *[StructField(d, StringType(), True) for d in self.dimensions],
            ]
        )

    def tables(
        self, projection: Declaration, payload: ResolvedPayload, lake: Lake
    ) -> Mapping[str, StructType]:
        return {
            lake.table(projection.name): self.table_schema(projection, payload),
            lake.staging(projection.name): self.staging_schema(),
        }

    def dedup_horizon(self) -> DedupHorizon:
        return self.horizon

    def beyond_horizon(self, floor: Floor) -> Column:
        if floor.time is None:
            return F.lit(False)
        return F.window("occurred_at", self.window).end <= F.lit(floor.time)

    def prune(
        self, session: SparkSession, projection: Declaration, payload: ResolvedPayload, lake: Lake, floor: Floor
    ) -> int:
        from delta.tables import DeltaTable

        if floor.time is None:
            return 0
        staging = DeltaTable.forPath(session, lake.staging(projection.name))
        # Staged rows of closed windows only: files are skipped by their window_end statistics, and only
        # a file that also holds open windows' rows is rewritten.
        staging.delete(F.col("window_end") <= F.lit(floor.time))
        metrics = staging.history(1).select("operationMetrics").first()
        return int((metrics[0] if metrics else {}).get("numDeletedRows", 0) or 0)

    def apply(self, batch: Batch) -> int:
        from delta.tables import DeltaTable

        session, staging_path = batch.session, batch.lake.staging(batch.projection.name)
        window = F.window("occurred_at", self.window)
        staged = (
            batch.events.dropDuplicates(["event_id"])
            .withColumns({"window_start": window.start, "window_end": window.end})
            .select(*self.staging_schema().fieldNames())
        )
        insert_new(batch, staging_path, staged, "t.event_id = s.event_id")

        # Recount every touched window from the staging set (now holding this batch's events exactly once).
        touched = staged.select("window_start").distinct()
        group = ["window_start", "window_end", *self.dimensions]
        counts = (
            session.read.format("delta")
            .load(staging_path)
            .join(touched, "window_start", "left_semi")
            .groupBy(*group)
            .agg(F.count(F.lit(1)).alias("count"))
        )
        same_dimensions = [f"t.`{d}` <=> s.`{d}`" for d in self.dimensions]
        same_group = " AND ".join(["t.window_start = s.window_start", *same_dimensions])
        recount = (
            DeltaTable.forPath(session, batch.table)
            .alias("t")
            .merge(counts.alias("s"), same_group)
            .whenMatchedUpdate(condition="t.count <> s.count", set={"count": F.col("s.count")})
            .whenNotMatchedInsertAll()
        )
        with batch.txn.applied_once(session):
            recount.execute()
        return 0
