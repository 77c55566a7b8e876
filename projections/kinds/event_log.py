"""`event_log`: every event once, deduplicated by `event_id`: envelope, payload columns, raw payload.

The log is its own deduplication index: a batch's MERGE reads only the files whose seq range overlaps the
batch's. A streamed batch is MERGEd in one pass from a low seq guessed before it is read (where the batch
before began), and only events below that guess, if any, in a second. The deduplication horizon (`horizon`,
7 days of event time by default) bounds that range: an event behind the horizon's floor is refused (logged
and counted, never applied), so one very late event cannot make a batch read the log back to its seq. The
log's rows themselves are what the projection is for and are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType, TimestampType

from projections.horizon import DEFAULT_DEDUP_HORIZON, DedupHorizon
from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import insert_new, trace_id_field
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
    keeps_trace_id = True  # of each row's own event
    lost_by_a_later_start = "every event before it"
    horizon: DedupHorizon = DEFAULT_DEDUP_HORIZON
    range_only_prunes = True  # the seq range only picks which of the log's files the MERGE compares with

    def dedup_horizon(self) -> DedupHorizon:
        return self.horizon

    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        fields = [f for f in payload.columns.fields if f.name != DEFAULT_KEY]
        return StructType(
            [
                *envelope_fields(),
                *([trace_id_field()] if projection.trace_id else []),
                *fields,
                StructField("payload", StringType(), True),
                StructField("headers", HEADERS_TYPE, True),
            ]
        )

    def apply(self, batch: Batch) -> int:
        schema = self.table_schema(batch.projection, batch.payload)
        source = batch.events.dropDuplicates(["event_id"]).select(*schema.fieldNames())
        insert_new(batch, batch.table, source, "t.event_id = s.event_id")
        return 0
