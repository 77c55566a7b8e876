"""`event_log`: every event once, deduplicated by `event_id`: envelope, payload columns, raw payload.

The log is its own deduplication index: a batch's MERGE reads only the files whose seq range overlaps the
batch's. Events above the log's highest seq, the usual case, cannot be in it yet: they are appended in one
pass, and only the rest of the batch (replays, late partitions) goes through the MERGE. The deduplication
horizon (`horizon`, 7 days of event time by default) bounds that range: an event behind the horizon's floor
is refused (logged and counted, never applied), so one very late event cannot make a batch read the log back
to its seq. The log's rows themselves are what the projection is for and are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType, TimestampType

from projections.horizon import DEFAULT_DEDUP_HORIZON, DedupHorizon
from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import append, insert_new
from projections.payload import DEFAULT_KEY, ResolvedPayload

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", StringType())]))


def envelope_fields() -> list[StructField]:
    return [
        StructField("event_id", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("event_type", StringType(), False),
        StructField("aggregate_type", StringType(), True),
        StructField("aggregate_id", StringType(), False),
        StructField("occurred_at", TimestampType(), False),
    ]


@dataclass(frozen=True)
class EventLog(Kind):
    """Append-only log of distinct events: MERGE on event_id, insert when not matched."""

    name = "event_log"
    lost_by_a_later_start = "every event before it"
    horizon: DedupHorizon = DEFAULT_DEDUP_HORIZON
    appends_above_table = True  # an event above the log's highest seq cannot be in it: append, no MERGE

    def dedup_horizon(self) -> DedupHorizon:
        return self.horizon

    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        fields = [f for f in payload.columns.fields if f.name != DEFAULT_KEY]
        return StructType(
            [
                *envelope_fields(),
                *fields,
                StructField("payload", StringType(), True),
                StructField("headers", HEADERS_TYPE, True),
            ]
        )

    def apply(self, batch: Batch) -> int:
        insert_new(batch, batch.table, self._distinct(batch), "t.event_id = s.event_id")
        return 0

    def append_new(self, batch: Batch) -> None:
        append(batch, batch.table, self._distinct(batch))

    def _distinct(self, batch: Batch) -> DataFrame:
        schema = self.table_schema(batch.projection, batch.payload)
        return batch.events.dropDuplicates(["event_id"]).select(*schema.fieldNames())
