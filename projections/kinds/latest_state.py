"""`latest_state` (SCD type 1): one row per key; the event with the highest seq wins.

Per micro-batch: keep the latest event of each key, then MERGE with the guard `source.seq > target.seq`.
A delete event type leaves a tombstone (`is_deleted = true`) carrying its seq, so an older event that
arrives later cannot bring the row back; `maintain` purges tombstones older than `tombstone_retention`.

With `carry_forward=False` (the default) a row is the latest event's payload: right for events that
carry the whole state. With `carry_forward=True` a column the latest event's type does not declare keeps
the value of the latest event that did (since the last delete): right for events that carry only what
changed. Each column then keeps its own seq (`field_seqs`), and the result is the same however the
events are split into batches or repeated. A delete clears the columns; a tombstone shows the delete
event's own fields, and a row created again after a delete starts from the new events only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from projections.errors import DeclarationError
from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import key_field, trace_id_field, value_fields
from projections.payload import DEFAULT_KEY, ResolvedPayload

if TYPE_CHECKING:
    from delta.tables import DeltaMergeBuilder


def metadata_fields(projection: Declaration) -> list[StructField]:
    """The latest event's identity, carried on each row (with its trace id, when the declaration keeps it)."""
    extra = [StructField("aggregate_id", StringType(), True)] if projection.key != DEFAULT_KEY else []
    traced = [trace_id_field()] if projection.trace_id else []
    return [
        *extra,
        StructField("event_id", StringType(), False),
        StructField("event_type", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("occurred_at", TimestampType(), False),
        *traced,
    ]


def validate_deletes(kind: str, deletes: Iterable[str], projection: Declaration) -> None:
    unknown = sorted(set(deletes) - set(projection.event_types))
    if unknown and not projection.handles_every_type:
        raise DeclarationError(
            f"projection {projection.name} ({kind}): delete event types {unknown} are not among its "
            f"event types {sorted(projection.event_types)}"
        )


@dataclass(frozen=True)
class LatestState(Kind):
    """One row per key, the newest event wins; deletes leave tombstones purged after `tombstone_retention`."""

    name = "latest_state"
    keeps_trace_id = True  # of the latest event, which the row shows
    counts_while_applying = True  # one MERGE, whose source (the newest event per key) is the only read
    lost_by_a_later_start = "every key not changed since then, and the columns carried forward from before it"
    deletes: frozenset[str] = field(default_factory=frozenset)
    tombstone_retention: timedelta = timedelta(days=7)
    carry_forward: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "deletes", frozenset(self.deletes))

    def validate(self, projection: Declaration) -> None:
        validate_deletes(self.name, self.deletes, projection)

    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        fields = [
            key_field(projection, payload),
            *value_fields(projection, payload),
            *metadata_fields(projection),
            StructField("is_deleted", BooleanType(), False),
        ]
        if self.carry_forward:
            fields += [
                StructField("deleted_seq", LongType(), True),
                StructField("field_seqs", MapType(StringType(), LongType(), True), True),
            ]
        return StructType(fields)

    def apply(self, batch: Batch) -> int:
        from delta.tables import DeltaTable

        projection = batch.projection
        schema = self.table_schema(projection, batch.payload)
        if self.carry_forward:
            source = _carry_forward_source(batch, self.deletes, schema)
        else:
            source = _latest_per_key(batch.events, projection.key).select(
                *[F.col(f.name) for f in schema.fields if f.name != "is_deleted"],
                F.col("event_type").isin(list(self.deletes)).alias("is_deleted"),
            )
        key = f"`{projection.key}`"
        merge = (
            DeltaTable.forPath(batch.session, batch.table)
            .alias("t")
            .merge(source.alias("s"), f"t.{key} = s.{key}")
        )
        if self.carry_forward:
            merge = _carry_forward_clauses(merge, batch, schema)
        else:
            merge = merge.whenMatchedUpdateAll(condition="s.seq > t.seq").whenNotMatchedInsertAll()
        with batch.txn.applied_once(batch.session):
            merge.execute()
        return 0

    def live_rows(self, table: DataFrame) -> DataFrame:
        return table.where(~F.col("is_deleted"))

    def purge_condition(self) -> str | None:
        seconds = int(self.tombstone_retention.total_seconds())
        return f"is_deleted AND occurred_at < current_timestamp() - INTERVAL {seconds} SECONDS"


def _latest_per_key(events: DataFrame, key: str) -> DataFrame:
    # Ties on seq are duplicates of one event; event_id only makes the choice deterministic.
    rank = Window.partitionBy(key).orderBy(F.col("seq").desc(), F.col("event_id"))
    return events.withColumn("_rank", F.row_number().over(rank)).where("_rank = 1").drop("_rank")


def _carry_forward_source(batch: Batch, deletes: frozenset[str], schema: StructType) -> DataFrame:
    """Per key: the latest event's identity, the last delete's seq, per column the latest value since it."""
    projection, payload = batch.projection, batch.payload
    key = projection.key
    values = value_fields(projection, payload)
    carriers = {f.name: [t for t in payload.by_event_type if f.name in payload.fields_of(t)] for f in values}
    deleted_seq = F.max(F.when(F.col("event_type").isin(list(deletes)), F.col("seq")))
    aggregates: list[Column] = [
        F.max_by(F.struct(*[F.col(f.name) for f in metadata_fields(projection)]), F.col("seq")).alias(
            "_latest"
        ),
        deleted_seq.alias("deleted_seq"),
    ]
    for f in values:
        carried_seq = F.when(F.col("event_type").isin(carriers[f.name]), F.col("seq"))
        aggregates += [
            F.max_by(F.col(f.name), carried_seq).alias(f.name),
            F.max(carried_seq).alias(f"_seq_{f.name}"),
        ]
    grouped = batch.events.groupBy(key).agg(*aggregates)
    # A column set before the batch's last delete does not survive it.
    last_delete, row_seq = F.coalesce(F.col("deleted_seq"), F.lit(-1)), F.col("_latest.seq")
    live = {}
    for f in values:
        seq = F.col(f"_seq_{f.name}")
        live[f.name] = F.when(_survives(seq, last_delete, row_seq), seq)
    grouped = grouped.withColumns(
        {
            **{f.name: F.when(live[f.name].isNotNull(), F.col(f.name)) for f in values},
            "field_seqs": F.map_from_arrays(
                F.array(*[F.lit(f.name) for f in values]), F.array(*[live[f.name] for f in values])
            )
            if values
            else F.create_map().cast(MapType(StringType(), LongType())),
        }
    )
    return grouped.select(
        F.col(key),
        *[F.col(f.name) for f in values],
        *[F.col(f"_latest.{f.name}").alias(f.name) for f in metadata_fields(projection)],
        F.col("_latest.event_type").isin(list(deletes)).alias("is_deleted"),
        F.col("deleted_seq"),
        F.col("field_seqs"),
    ).select(*schema.fieldNames())


def _survives(seq: Column, deleted_seq: Column, row_seq: Column) -> Column:
    """A column value outlives the last delete if it is newer, or is the delete's own while it is the latest."""
    return (seq > deleted_seq) | ((seq == deleted_seq) & (deleted_seq == row_seq))


def _carry_forward_clauses(merge: DeltaMergeBuilder, batch: Batch, schema: StructType) -> DeltaMergeBuilder:
    """Update each column whose source seq is newer, then drop what an overall newer delete cleared."""
    projection = batch.projection
    values = value_fields(projection, batch.payload)
    deleted = "greatest(coalesce(t.deleted_seq, -1), coalesce(s.deleted_seq, -1))"
    newer_row = "s.seq > t.seq"
    assignments: dict[str, str] = {}
    for f in values:
        name = f"`{f.name}`"
        source_seq, target_seq = f"s.field_seqs['{f.name}']", f"t.field_seqs['{f.name}']"
        source_wins = f"({source_seq} IS NOT NULL AND ({target_seq} IS NULL OR {source_seq} > {target_seq}))"
        seq = f"(CASE WHEN {source_wins} THEN {source_seq} ELSE {target_seq} END)"
        survives = f"({seq} > {deleted} OR ({seq} = {deleted} AND {deleted} = greatest(t.seq, s.seq)))"
        assignments[f.name] = (
            f"CASE WHEN {survives} THEN (CASE WHEN {source_wins} THEN s.{name} ELSE t.{name} END) END"
        )
        assignments[f"_seq_{f.name}"] = f"CASE WHEN {survives} THEN {seq} END"
    for f in metadata_fields(projection):
        assignments[f.name] = f"CASE WHEN {newer_row} THEN s.`{f.name}` ELSE t.`{f.name}` END"
    assignments["is_deleted"] = f"CASE WHEN {newer_row} THEN s.is_deleted ELSE t.is_deleted END"
    assignments["deleted_seq"] = f"nullif({deleted}, -1)"
    names = [f.name for f in values]
    if names:
        assignments["field_seqs"] = (
            "map_from_arrays(array("
            + ", ".join(f"'{n}'" for n in names)
            + "), array("
            + ", ".join(assignments.pop(f"_seq_{n}") for n in names)
            + "))"
        )
    else:
        assignments["field_seqs"] = "t.field_seqs"
    changed = " OR ".join(
        [newer_row, "coalesce(s.deleted_seq, -1) > coalesce(t.deleted_seq, -1)"]
        + [f"coalesce(s.field_seqs['{n}'], -1) > coalesce(t.field_seqs['{n}'], -1)" for n in names]
    )
    update: dict[str, str | Column] = {k: F.expr(v) for k, v in assignments.items()}
    return merge.whenMatchedUpdate(condition=changed, set=update).whenNotMatchedInsertAll()
