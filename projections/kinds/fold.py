"""`fold`: a user function folds each key's events, in seq order, into a state stored one row per key.

The result is the fold of the key's distinct events in seq order, however they are batched and in
whatever order they arrive. Each batch first keeps its events in an event store (`<lake>/_staging/<name>`,
one row per key and seq). Events newer than the key's stored `seq` (the last one folded) are folded onto
the stored state; when an event older than that arrives (a key spanning partitions or topics, a re-send
after a producer rebuild), the key is folded again from None over all its kept events. The function gets
the current state (None before the first event or after a deletion) and an `Event`, and returns the new
state as a dict of the declared state fields, or None to delete the row (a tombstone keeps its seq).
The function must therefore be deterministic: a re-fold calls it again on events it has seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

from projections.errors import DeclarationError, FoldError, RefusedError
from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import key_field, value_fields
from projections.kinds.touched import target_key, touched_keys
from projections.payload import DEFAULT_KEY, RESERVED_COLUMNS, PayloadSchema, ResolvedPayload, as_struct

if TYPE_CHECKING:
    from projections.lake import Lake

State = dict[str, Any]

# Marks a key folded again from its kept events: its row is replaced even if its seq did not grow.
_REFOLD = "_refold"


@dataclass(frozen=True)
class Event:
    """One event as a fold function sees it; `payload` holds the fields its event type declares."""

    event_id: str
    event_type: str
    aggregate_type: str | None
    aggregate_id: str
    key: Any
    seq: int
    occurred_at: datetime
    payload: Mapping[str, Any]


FoldFunction = Callable[[State | None, Event], State | None]


@dataclass(frozen=True)
class Fold(Kind):
    """Folds events into a state per key with `function`; `state` declares the state's columns."""

    name = "fold"
    lost_by_a_later_start = "every event before it, each key then being folded from part of its events only"
    function: FoldFunction
    state: PayloadSchema
    tombstone_retention: timedelta = timedelta(days=7)

    def validate(self, projection: Declaration) -> None:
        if not callable(self.function):
            raise DeclarationError(f"projection {projection.name} (fold): function must be callable")

    def state_schema(self, projection: Declaration) -> StructType:
        schema = as_struct(self.state, f"projection {projection.name} (fold): state schema")
        clashes = [n for n in schema.fieldNames() if n in RESERVED_COLUMNS or n == projection.key]
        if clashes:
            raise DeclarationError(
                f"projection {projection.name} (fold): state fields {clashes} collide with the key or with "
                "columns the framework adds"
            )
        return schema

    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        extra = [StructField("aggregate_id", StringType(), True)] if projection.key != DEFAULT_KEY else []
        state = [StructField(f.name, f.dataType, True) for f in self.state_schema(projection).fields]
        return StructType(
            [
                key_field(projection, payload),
                *state,
                *extra,
                StructField("event_id", StringType(), False),
                StructField("event_type", StringType(), False),
                StructField("seq", LongType(), False),
                StructField("occurred_at", TimestampType(), False),
                StructField("is_deleted", BooleanType(), False),
            ]
        )

    def event_store_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        """The kept events: what a re-fold needs of each, one row per key and seq."""
        extra = [StructField("aggregate_id", StringType(), True)] if projection.key != DEFAULT_KEY else []
        return StructType(
            [
                key_field(projection, payload),
                *extra,
                StructField("event_id", StringType(), False),
                StructField("event_type", StringType(), False),
                StructField("aggregate_type", StringType(), True),
                StructField("seq", LongType(), False),
                StructField("occurred_at", TimestampType(), False),
                *value_fields(projection, payload),
            ]
        )

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

    def apply(self, batch: Batch) -> int:
        from delta.tables import DeltaTable

        projection, key, session = batch.projection, batch.projection.key, batch.session
        schema = self.table_schema(projection, batch.payload)
        state_names = self.state_schema(projection).fieldNames()
        store_path = batch.lake.staging(projection.name)
        events = batch.events.dropDuplicates([key, "seq"]).select(
            *self.event_store_schema(projection, batch.payload).fieldNames()
        )
        low, high = batch.seq_range
        keep = (
            DeltaTable.forPath(session, store_path)
            .alias("t")
            .merge(events.alias("s"), f"t.seq BETWEEN {low} AND {high} AND t.seq = s.seq AND t.`{key}` = s.`{key}`")
            .whenNotMatchedInsertAll()
        )
        with batch.txn.applied_once(session):
            keep.execute()

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
        arrived = events.join(stored, key, "left")
        # Decided from the table alone, so a batch run again after a failure decides the same.
        late = arrived.where(F.col("seq") < F.col("_applied_seq")).select(key).distinct().collect()
        pending = (
            arrived.where(F.col("seq") > F.coalesce(F.col("_applied_seq"), F.lit(-1)))
            .withColumn(_REFOLD, F.lit(False))
        )
        if late:
            late_keys = session.createDataFrame(late, StructType([schema[key]]))
            late_listed = touched_keys(late_keys, key)
            assert late_listed is not None
            refold = (
                session.read.format("delta")
                .load(store_path)
                .where(late_listed.on(F.col(key)))
                .join(late_keys, key, "left_semi")
            ).withColumn(_REFOLD, F.lit(True))
            pending = pending.join(late_keys, key, "left_anti").unionByName(refold, allowMissingColumns=True)
        folder = _KeyFolder(
            function=self.function,
            key=key,
            fields_by_type={t: batch.payload.fields_of(t) for t in batch.payload.by_event_type},
            state_names=tuple(state_names),
            columns=tuple(schema.fieldNames()),
        )
        rows = pending.rdd.map(lambda row: (row[key], row)).groupByKey().map(folder)
        with_refold = StructType([*schema.fields, StructField(_REFOLD, BooleanType(), False)])
        folded: DataFrame = session.createDataFrame(rows, with_refold)
        columns: dict[str, str | Column] = {name: F.col(f"s.`{name}`") for name in schema.fieldNames()}
        merge = (
            DeltaTable.forPath(session, batch.table)
            .alias("t")
            .merge(folded.alias("s"), keys.on(target_key(key)) & (target_key(key) == target_key(key, "s")))
            # A re-fold may end on the stored seq and still change the state.
            .whenMatchedUpdate(condition=f"s.seq > t.seq OR s.{_REFOLD}", set=columns)
            .whenNotMatchedInsert(values=columns)
        )
        with batch.txn.applied_once(session):
            merge.execute()
        return 0

    def live_rows(self, table: DataFrame) -> DataFrame:
        return table.where(~F.col("is_deleted"))

    def purge_condition(self) -> str | None:
        seconds = int(self.tombstone_retention.total_seconds())
        return f"is_deleted AND occurred_at < current_timestamp() - INTERVAL {seconds} SECONDS"


@dataclass(frozen=True)
class _KeyFolder:
    """Runs on executors: folds one key's pending events onto its stored state (or, re-folding, onto None).

    Returns the new row, then whether it is a re-fold."""

    function: FoldFunction
    key: str
    fields_by_type: Mapping[str, tuple[str, ...]]
    state_names: tuple[str, ...]
    columns: tuple[str, ...]

    def __call__(self, item: tuple[Any, Iterable[Row]]) -> tuple[Any, ...]:
        key, rows = item
        ordered = sorted(rows, key=lambda r: int(r["seq"]))
        first = ordered[0]
        state: State | None = None
        if first["_state"] is not None and first["_applied_seq"] is not None and not first["_deleted"]:
            state = first["_state"].asDict(recursive=True)
        for row in ordered:
            fields = self.fields_by_type.get(row["event_type"], ())
            event = Event(
                event_id=row["event_id"],
                event_type=row["event_type"],
                aggregate_type=row["aggregate_type"],
                aggregate_id=row["aggregate_id"],
                key=key,
                seq=int(row["seq"]),
                occurred_at=row["occurred_at"],
                payload={name: row[name] for name in fields},
            )
            state = self.function(None if state is None else dict(state), event)
            if state is not None:
                unknown = sorted(set(state) - set(self.state_names))
                if unknown:
                    raise FoldError(
                        f"fold function returned fields {unknown} for key {key!r} at seq {event.seq}; "
                        "the declared "
                        f"state has {list(self.state_names)}"
                    )
        last = ordered[-1]
        values: dict[str, Any] = {name: (state or {}).get(name) for name in self.state_names}
        values.update(
            {
                self.key: key,
                "aggregate_id": last["aggregate_id"],
                "event_id": last["event_id"],
                "event_type": last["event_type"],
                "seq": int(last["seq"]),
                "occurred_at": last["occurred_at"],
                "is_deleted": state is None,
            }
        )
        return (*(values[name] for name in self.columns), bool(first[_REFOLD]))
