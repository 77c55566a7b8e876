"""`history` (SCD type 2): one row per version of a key, valid from its event's seq until the next version's.

Each batch rebuilds the timeline of the keys it touches from their stored versions (reading only the files
that may hold those keys) plus its own events, then MERGEs on (key, valid_from_seq): new versions are
inserted, neighbours get their `valid_to_seq` fixed. An event that arrives late lands in the middle of the
timeline; a duplicate changes nothing. A delete event type closes the timeline with a version marked `is_deleted`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import key_field, trace_id_field, value_fields
from projections.kinds.latest_state import validate_deletes
from projections.kinds.touched import target_key, touched_keys
from projections.payload import DEFAULT_KEY, ResolvedPayload

_VERSION_ONLY = ("valid_to_seq", "valid_to", "is_current")


@dataclass(frozen=True)
class History(Kind):
    """Versions per key with valid_from/valid_to seq and time; `is_current` marks the latest version."""

    name = "history"
    keeps_trace_id = True  # of each version's event
    lost_by_a_later_start = "every version before it, and every key not changed since then"
    deletes: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "deletes", frozenset(self.deletes))

    def validate(self, projection: Declaration) -> None:
        validate_deletes(self.name, self.deletes, projection)

    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        extra = [StructField("aggregate_id", StringType(), True)] if projection.key != DEFAULT_KEY else []
        return StructType(
            [
                key_field(projection, payload),
                *value_fields(projection, payload),
                *extra,
                StructField("event_id", StringType(), False),
                StructField("event_type", StringType(), False),
                *([trace_id_field()] if projection.trace_id else []),
                StructField("valid_from_seq", LongType(), False),
                StructField("valid_to_seq", LongType(), True),
                StructField("valid_from", TimestampType(), False),
                StructField("valid_to", TimestampType(), True),
                StructField("is_current", BooleanType(), False),
                StructField("is_deleted", BooleanType(), False),
            ]
        )

    def apply(self, batch: Batch) -> int:
        from delta.tables import DeltaTable

        key = batch.projection.key
        schema = self.table_schema(batch.projection, batch.payload)
        version_columns = [n for n in schema.fieldNames() if n not in _VERSION_ONLY]
        new = (
            batch.events.dropDuplicates([key, "seq"])
            .withColumns(
                {
                    "valid_from_seq": F.col("seq"),
                    "valid_from": F.col("occurred_at"),
                    "is_deleted": F.col("event_type").isin(list(self.deletes)),
                }
            )
            .select(*version_columns)
        )
        keys = touched_keys(new, key)
        assert keys is not None  # a batch always has events
        # Only the files that may hold a touched key are read, here and by the MERGE (see kinds/touched.py).
        stored = batch.session.read.format("delta").load(batch.table).where(keys.on(F.col(key)))
        touched = stored.join(new.select(key).distinct(), key, "left_semi").select(*version_columns)
        timeline = _timeline(touched.unionByName(new).dropDuplicates([key, "valid_from_seq"]), key)
        condition = (
            keys.on(target_key(key))
            & (target_key(key) == target_key(key, "s"))
            & (F.col("t.valid_from_seq") == F.col("s.valid_from_seq"))
        )
        merge = (
            DeltaTable.forPath(batch.session, batch.table)
            .alias("t")
            .merge(timeline.select(*schema.fieldNames()).alias("s"), condition)
            .whenMatchedUpdate(
                condition="NOT (t.valid_to_seq <=> s.valid_to_seq)",
                set={name: F.col(f"s.{name}") for name in _VERSION_ONLY},
            )
            .whenNotMatchedInsertAll()
        )
        with batch.txn.applied_once(batch.session):
            merge.execute()
        return 0


def _timeline(versions: DataFrame, key: str) -> DataFrame:
    following = Window.partitionBy(key).orderBy("valid_from_seq")
    return versions.withColumns(
        {
            "valid_to_seq": F.lead("valid_from_seq").over(following),
            "valid_to": F.lead("valid_from").over(following),
        }
    ).withColumn("is_current", F.col("valid_to_seq").isNull())
