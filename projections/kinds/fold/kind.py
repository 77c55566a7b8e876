"""The `Fold` kind: its declaration, its tables, and a batch applied (its events kept in the event store, each
touched key folded, the table MERGEd). The rule it keeps is in the package's docstring.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

from projections.errors import DeclarationError, RefusedError
from projections.horizon import DEFAULT_DEDUP_HORIZON, DedupHorizon, Floor
from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import insert_new, key_field
from projections.kinds.fold.event_store import add_base_columns, compact, event_fields, read_bases, store_schema
from projections.kinds.fold.folding import BASE, BASE_STATE, REFOLD, FoldFunction, KeyFolder
from projections.kinds.touched import target_key, touched_keys
from projections.payload import DEFAULT_KEY, RESERVED_COLUMNS, PayloadSchema, ResolvedPayload, as_struct

if TYPE_CHECKING:
    from projections.lake import Lake

# The fold's one logger, whichever of its modules logs: the name its log lines carry.
log = logging.getLogger("projections.kinds.fold")


@dataclass(frozen=True)
class Fold(Kind):
    """Folds events into a state per key with `function`; `state` declares the state's columns.

    `horizon` bounds the kept events (see the package's docstring)."""

    name = "fold"
    lost_by_a_later_start = "every event before it, each key then being folded from part of its events only"
    function: FoldFunction
    state: PayloadSchema
    tombstone_retention: timedelta = timedelta(days=7)
    horizon: DedupHorizon = DEFAULT_DEDUP_HORIZON

    def validate(self, projection: Declaration) -> None:
        if not callable(self.function):
            raise DeclarationError(f"projection {projection.name} (fold): function must be callable")

    def dedup_horizon(self) -> DedupHorizon:
        return self.horizon

    def state_schema(self, projection: Declaration) -> StructType:
        schema = as_struct(self.state, f"projection {projection.name} (fold): state schema")
        clashes = [n for n in schema.fieldNames() if n in RESERVED_COLUMNS or n == projection.key]
        if clashes:
            raise DeclarationError(
                f"projection {projection.name} (fold): state fields {clashes} collide with the key or with "
                "columns the framework adds"
            )
        return schema

    def _state_fields(self, projection: Declaration) -> list[StructField]:
        return [StructField(f.name, f.dataType, True) for f in self.state_schema(projection).fields]

    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        extra = [StructField("aggregate_id", StringType(), True)] if projection.key != DEFAULT_KEY else []
        return StructType(
            [
                key_field(projection, payload),
                *self._state_fields(projection),
                *extra,
                StructField("event_id", StringType(), False),
                StructField("event_type", StringType(), False),
                StructField("seq", LongType(), False),
                StructField("occurred_at", TimestampType(), False),
                StructField("is_deleted", BooleanType(), False),
            ]
        )

    def event_store_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        """The kept events, one row per key and seq, then the base columns (see `event_store`)."""
        return store_schema(projection, payload, self._state_fields(projection))

    def tables(
        self, projection: Declaration, payload: ResolvedPayload, lake: Lake
    ) -> Mapping[str, StructType]:
        return {
            lake.table(projection.name): self.table_schema(projection, payload),
            lake.staging(projection.name): self.event_store_schema(projection, payload),
        }

    def check_tables(self, session: SparkSession, projection: Declaration, lake: Lake) -> None:
        from delta.tables import DeltaTable

        table, store = lake.table(projection.name), lake.staging(projection.name)
        if not DeltaTable.isDeltaTable(session, table) or DeltaTable.isDeltaTable(session, store):
            return
        if session.read.format("delta").load(table).limit(1).count():
            # A re-fold from an event store that lacks the events folded so far would lose them silently.
            raise RefusedError(
                f"projection {projection.name} (fold) has a table at {table} but no event store at {store} "
                "(the table was built before folds kept their events); rebuild it with "
                f"`outbox-projections replay {projection.name} --from-offset earliest --yes`"
            )

    def upgrade_tables(
        self, session: SparkSession, projection: Declaration, payload: ResolvedPayload, lake: Lake
    ) -> None:
        add_base_columns(
            session, lake.staging(projection.name), self.event_store_schema(projection, payload), projection.name
        )

    def apply(self, batch: Batch) -> int:
        from delta.tables import DeltaTable

        projection, key, session = batch.projection, batch.projection.key, batch.session
        schema = self.table_schema(projection, batch.payload)
        state_names = self.state_schema(projection).fieldNames()
        store_path = batch.lake.staging(projection.name)
        events = batch.events.dropDuplicates([key, "seq"]).select(
            *[f.name for f in event_fields(projection, batch.payload)]
        )
        keys = touched_keys(events, key)
        assert keys is not None  # a batch always has events
        # Only the files that may hold a touched key are read, here and by the MERGE (see kinds/touched.py).
        stored = (
            session.read.format("delta")
            .load(batch.table)
            .where(keys.on(F.col(key)))
            .select(
                F.col(key),
                F.col("seq").alias("_applied_seq"),
                F.col("is_deleted").alias("_deleted"),
                F.struct(*[F.col(n) for n in state_names]).alias("_state"),
            )
        )
        # Decided from the table and the bases alone, before this batch writes either, so a batch run again
        # after a failure decides the same.
        key_schema = StructType([schema[key]])
        late = _late_keys(events.join(stored, key, "left"), key)
        refused = 0
        if late:
            bases = read_bases(session, store_path, key, session.createDataFrame(late, key_schema))
            refused = self._refuse_below_bases(batch, bases)
            if refused:
                above = F.col("_base_seq").isNull() | (F.col("seq") > F.col("_base_seq"))
                events = events.join(bases, key, "left").where(above).drop("_base_seq")
                late = _late_keys(events.join(stored, key, "left"), key)
        events = events.withColumns(
            {BASE: F.lit(False), BASE_STATE: F.lit(None).cast(StructType(self._state_fields(projection)))}
        )
        insert_new(batch, store_path, events, f"t.seq = s.seq AND t.`{key}` = s.`{key}`")

        arrived = events.join(stored, key, "left")
        pending = (
            arrived.where(F.col("seq") > F.coalesce(F.col("_applied_seq"), F.lit(-1)))
            .withColumn(REFOLD, F.lit(False))
        )
        if late:
            late_keys = session.createDataFrame(late, key_schema)
            late_listed = touched_keys(late_keys, key)
            assert late_listed is not None
            # A late key's kept events, this batch's among them, from its base when it has one.
            refold = (
                session.read.format("delta")
                .load(store_path)
                .where(late_listed.on(F.col(key)))
                .join(late_keys, key, "left_semi")
            ).withColumn(REFOLD, F.lit(True))
            pending = pending.join(late_keys, key, "left_anti").unionByName(refold, allowMissingColumns=True)
        folder = self._folder(projection, batch.payload)
        rows = pending.rdd.map(lambda row: (row[key], row)).groupByKey().map(folder)
        with_refold = StructType([*schema.fields, StructField(REFOLD, BooleanType(), False)])
        folded: DataFrame = session.createDataFrame(rows, with_refold)
        columns: dict[str, str | Column] = {name: F.col(f"s.`{name}`") for name in schema.fieldNames()}
        merge = (
            DeltaTable.forPath(session, batch.table)
            .alias("t")
            .merge(folded.alias("s"), keys.on(target_key(key)) & (target_key(key) == target_key(key, "s")))
            # A re-fold may end on the stored seq and still change the state.
            .whenMatchedUpdate(condition=f"s.seq > t.seq OR s.{REFOLD}", set=columns)
            .whenNotMatchedInsert(values=columns)
        )
        with batch.txn.applied_once(session):
            merge.execute()
        return refused

    def _refuse_below_bases(self, batch: Batch, bases: DataFrame) -> int:
        """Count and log the batch's events at or below their key's base seq: they cannot be folded in order."""
        below = batch.events.join(bases, batch.projection.key).where(F.col("seq") <= F.col("_base_seq"))
        refused = below.count()
        if refused:
            sample = [
                r.asDict()
                for r in below.select("event_id", "seq", "_base_seq", "topic", "partition", "offset")
                .limit(5)
                .collect()
            ]
            log.warning(
                "events at or below their key's compacted fold base refused (not applied)",
                extra={
                    "projection": batch.projection.name,
                    "batch_id": batch.batch_id,
                    "count": refused,
                    "horizon": self.horizon.describe(),
                    "sample": sample,
                },
            )
        return refused

    def prune(
        self, session: SparkSession, projection: Declaration, payload: ResolvedPayload, lake: Lake, floor: Floor
    ) -> int:
        """Compact each key's seq-prefix of kept events behind the floor into its base row, in one commit
        (`compact`)."""
        if floor.seq is None and floor.time is None:
            return 0
        return compact(
            session,
            lake.staging(projection.name),
            projection.key,
            self.beyond_horizon(floor),
            self._folder(projection, payload),
        )

    def _folder(self, projection: Declaration, payload: ResolvedPayload) -> KeyFolder:
        return KeyFolder(
            function=self.function,
            key=projection.key,
            fields_by_type={t: payload.fields_of(t) for t in payload.by_event_type},
            state_names=tuple(self.state_schema(projection).fieldNames()),
            columns=tuple(self.table_schema(projection, payload).fieldNames()),
        )

    def live_rows(self, table: DataFrame) -> DataFrame:
        return table.where(~F.col("is_deleted"))

    def purge_condition(self) -> str | None:
        seconds = int(self.tombstone_retention.total_seconds())
        return f"is_deleted AND occurred_at < current_timestamp() - INTERVAL {seconds} SECONDS"


def _late_keys(arrived: DataFrame, key: str) -> list[Row]:
    """The keys with an event older than the one their table row was last folded with."""
    return arrived.where(F.col("seq") < F.col("_applied_seq")).select(key).distinct().collect()
