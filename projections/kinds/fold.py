"""`fold`: a user function folds each key's events, in seq order, into a state stored one row per key.

The result is the fold of the key's distinct events in seq order, however they are batched and in
whatever order they arrive. Each batch first keeps its events in an event store (`<lake>/_staging/<name>`,
one row per key and seq). Events newer than the key's stored `seq` (the last one folded) are folded onto
the stored state; when an event older than that arrives (a key spanning partitions or topics, a re-send
after a producer rebuild), the key is folded again over its kept events, from its base (below) or None.
The function gets the current state (None before the first event or after a deletion) and an `Event`, and
returns the new state as a dict of the declared state fields, or None to delete the row (a tombstone keeps
its seq). The function must therefore be deterministic: a re-fold calls it again on events it has seen.

The event store is kept within the deduplication horizon (`horizon`, 7 days of event time by default; see
projections/horizon.py). Every `horizon.prune_every` batches, each key's kept events behind the horizon's
floor are compacted, in one Delta commit, into one base row: the last of them, holding the state folded up
to it (None too). Only a seq-prefix is compacted, up to the key's first event still inside the horizon, so
an event time older than seq order says keeps its event. An event behind the floor is refused by the
applier, like for the other kinds; an event inside it but at or below its key's base seq (possible with a
time horizon) can no longer be folded in seq order and is refused here, counted with them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

from projections.errors import DeclarationError, FoldError, RefusedError
from projections.horizon import DEFAULT_DEDUP_HORIZON, DedupHorizon, Floor
from projections.kind import Batch, Declaration, Kind
from projections.kinds.base import insert_new, key_field, value_fields
from projections.kinds.touched import target_key, touched_keys
from projections.payload import DEFAULT_KEY, RESERVED_COLUMNS, PayloadSchema, ResolvedPayload, as_struct

if TYPE_CHECKING:
    from projections.lake import Lake

log = logging.getLogger(__name__)

State = dict[str, Any]

# Marks a key folded again from its kept events: its row is replaced even if its seq did not grow.
_REFOLD = "_refold"
# The event store's base rows: a key's last compacted event, marked `_base`, holding in `_base_state` the
# state folded up to it (null: None, a deleted key). Both nullable: a store written before bases gets
# them on prepare, its rows all events.
_BASE = "_base"
_BASE_STATE = "_base_state"


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
    """Folds events into a state per key with `function`; `state` declares the state's columns.

    `horizon` bounds the kept events (see the module's docstring)."""

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
        """The kept events, one row per key and seq, then the base columns (see `_BASE`)."""
        return StructType([*self._event_fields(projection, payload), *self._base_fields(projection)])

    def _event_fields(self, projection: Declaration, payload: ResolvedPayload) -> list[StructField]:
        """What a re-fold needs of each kept event."""
        extra = [StructField("aggregate_id", StringType(), True)] if projection.key != DEFAULT_KEY else []
        return [
            key_field(projection, payload),
            *extra,
            StructField("event_id", StringType(), False),
            StructField("event_type", StringType(), False),
            StructField("aggregate_type", StringType(), True),
            StructField("seq", LongType(), False),
            StructField("occurred_at", TimestampType(), False),
            *value_fields(projection, payload),
        ]

    def _base_fields(self, projection: Declaration) -> list[StructField]:
        return [
            StructField(_BASE, BooleanType(), True),
            StructField(_BASE_STATE, StructType(self._state_fields(projection)), True),
        ]

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
        store = lake.staging(projection.name)
        if {_BASE, _BASE_STATE} <= set(session.read.format("delta").load(store).columns):
            return
        # An event store from before bases. An empty append with Delta's schema evolution adds the base
        # columns in one commit, typed as declared (no DDL to spell); its rows read them as null: events.
        empty = session.createDataFrame([], self.event_store_schema(projection, payload))
        empty.write.format("delta").mode("append").option("mergeSchema", "true").save(store)
        log.info("fold event store given its base columns", extra={"projection": projection.name, "store": store})

    def apply(self, batch: Batch) -> int:
        from delta.tables import DeltaTable

        projection, key, session = batch.projection, batch.projection.key, batch.session
        schema = self.table_schema(projection, batch.payload)
        state_names = self.state_schema(projection).fieldNames()
        store_path = batch.lake.staging(projection.name)
        events = batch.events.dropDuplicates([key, "seq"]).select(
            *[f.name for f in self._event_fields(projection, batch.payload)]
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
            bases = _bases(session, store_path, key, session.createDataFrame(late, key_schema))
            refused = self._refuse_below_bases(batch, bases)
            if refused:
                above = F.col("_base_seq").isNull() | (F.col("seq") > F.col("_base_seq"))
                events = events.join(bases, key, "left").where(above).drop("_base_seq")
                late = _late_keys(events.join(stored, key, "left"), key)
        events = events.withColumns(
            {_BASE: F.lit(False), _BASE_STATE: F.lit(None).cast(StructType(self._state_fields(projection)))}
        )
        insert_new(batch, store_path, events, f"t.seq = s.seq AND t.`{key}` = s.`{key}`")

        arrived = events.join(stored, key, "left")
        pending = (
            arrived.where(F.col("seq") > F.coalesce(F.col("_applied_seq"), F.lit(-1)))
            .withColumn(_REFOLD, F.lit(False))
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
            ).withColumn(_REFOLD, F.lit(True))
            pending = pending.join(late_keys, key, "left_anti").unionByName(refold, allowMissingColumns=True)
        folder = self._folder(projection, batch.payload)
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
        """Compact each key's seq-prefix of kept events behind the floor into its base row, in one commit.

        Decided from the store and the floor alone, and a key already compacted is left alone: run again
        after a crash, the prune makes the same commit or none."""
        from delta.tables import DeltaTable

        if floor.seq is None and floor.time is None:
            return 0
        key, path = projection.key, lake.staging(projection.name)
        store = session.read.format("delta").load(path)
        is_base = F.coalesce(F.col(_BASE), F.lit(False))
        behind = self.beyond_horizon(floor) | is_base
        # The prefix ends at the key's first kept event inside the horizon: an event behind the floor with a
        # higher seq (older in event time than its seq says) stays, so that a late event below it can still
        # be folded in seq order.
        inside = store.where(~behind).groupBy(key).agg(F.min("seq").alias("_inside"))
        prefix = (
            store.join(inside, key, "left")
            .where(behind & (F.col("_inside").isNull() | (F.col("seq") < F.col("_inside"))))
            .drop("_inside")
        )
        # A prefix that is only a base row is compacted already.
        prefix = prefix.join(prefix.where(~is_base).select(key).distinct(), key, "left_semi").persist()
        try:
            low, high, rows, keys = prefix.agg(
                F.min("seq"), F.max("seq"), F.count(F.lit(1)), F.count_distinct(key)
            ).first() or (None, None, 0, 0)
            if low is None:
                return 0
            folder = self._folder(projection, payload)
            based = prefix.rdd.map(lambda row: (row[key], row)).groupByKey().map(folder.base)
            bases = session.createDataFrame(
                based,
                StructType([store.schema[key], StructField("_base_seq", LongType(), False), store.schema[_BASE_STATE]]),
            )
            compact = (
                DeltaTable.forPath(session, path)
                .alias("t")
                .merge(
                    prefix.select(key, "seq").join(bases, key).alias("s"),
                    f"t.seq BETWEEN {low} AND {high} AND t.seq = s.seq AND t.`{key}` = s.`{key}`",
                )
                # The prefix's last event becomes the key's base; the rest of it, an older base too, goes.
                .whenMatchedUpdate(
                    condition="t.seq = s._base_seq",
                    set={_BASE: F.lit(True), _BASE_STATE: F.col(f"s.{_BASE_STATE}")},
                )
                .whenMatchedDelete()
            )
            compact.execute()
        finally:
            prefix.unpersist()
        return int(rows) - int(keys)  # each key's prefix less the row that became its base

    def _folder(self, projection: Declaration, payload: ResolvedPayload) -> _KeyFolder:
        return _KeyFolder(
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


def _bases(session: SparkSession, store: str, key: str, keys: DataFrame) -> DataFrame:
    """The base seq (`_base_seq`) of those of the keys that have a base row."""
    listed = touched_keys(keys, key)
    assert listed is not None
    bases = (
        session.read.format("delta")
        .load(store)
        .where(listed.on(F.col(key)) & F.col(_BASE))
        .join(keys, key, "left_semi")
        .select(key, F.col("seq").alias("_base_seq"))
    )
    # At most one row per key: read once, not again by the MERGE into the store that it filters.
    return session.createDataFrame(bases.collect(), bases.schema)


@dataclass(frozen=True)
class _KeyFolder:
    """Runs on executors: folds one key's rows in seq order, for its table row or for its base row."""

    function: FoldFunction
    key: str
    fields_by_type: Mapping[str, tuple[str, ...]]
    state_names: tuple[str, ...]
    columns: tuple[str, ...]

    def __call__(self, item: tuple[Any, Iterable[Row]]) -> tuple[Any, ...]:
        """The key's pending events folded onto its stored state (re-folding: onto its base, or None).

        Returns the new table row, then whether it is a re-fold."""
        key, rows = item
        ordered = sorted(rows, key=lambda r: int(r["seq"]))
        first = ordered[0]
        state: State | None = None
        if first["_state"] is not None and first["_applied_seq"] is not None and not first["_deleted"]:
            state = first["_state"].asDict(recursive=True)
        state = self._fold(key, ordered, state)
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

    def base(self, item: tuple[Any, Iterable[Row]]) -> tuple[Any, int, tuple[Any, ...] | None]:
        """The key's compacted rows folded into its new base: the key, the last seq, the state (None: None)."""
        key, rows = item
        ordered = sorted(rows, key=lambda r: int(r["seq"]))
        state = self._fold(key, ordered, None)
        return key, int(ordered[-1]["seq"]), None if state is None else tuple(state.get(n) for n in self.state_names)

    def _fold(self, key: Any, ordered: list[Row], state: State | None) -> State | None:
        for row in ordered:
            if row[_BASE]:
                state = None if row[_BASE_STATE] is None else row[_BASE_STATE].asDict(recursive=True)
                continue
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
        return state
