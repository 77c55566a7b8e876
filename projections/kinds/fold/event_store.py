"""The fold's event store (`<lake>/_staging/<name>`): the kept events, one row per key and seq, and per key at
most one base row (`BASE`). Reading the bases, giving a store from before bases its base columns, and compacting
each key's events behind the horizon's floor into its base.
"""

from __future__ import annotations

import logging

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

from projections.kind import Declaration
from projections.kinds.base import key_field, value_fields
from projections.kinds.fold.folding import BASE, BASE_STATE, KeyFolder
from projections.kinds.touched import touched_keys
from projections.payload import DEFAULT_KEY, ResolvedPayload

# The fold's one logger, whichever of its modules logs: the name its log lines carry.
log = logging.getLogger("projections.kinds.fold")


def event_fields(projection: Declaration, payload: ResolvedPayload) -> list[StructField]:
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


def store_schema(projection: Declaration, payload: ResolvedPayload, state_fields: list[StructField]) -> StructType:
    """The kept events, one row per key and seq, then the base columns (see `BASE`)."""
    return StructType(
        [
            *event_fields(projection, payload),
            StructField(BASE, BooleanType(), True),
            StructField(BASE_STATE, StructType(state_fields), True),
        ]
    )


def add_base_columns(session: SparkSession, store: str, declared: StructType, projection: str) -> None:
    """Give an event store from before bases the base columns of its `declared` schema; others stay as they are."""
    if {BASE, BASE_STATE} <= set(session.read.format("delta").load(store).columns):
        return
    # An empty append with Delta's schema evolution adds the base columns in one commit, typed as declared (no
    # DDL to spell); its rows read them as null: events.
    empty = session.createDataFrame([], declared)
    empty.write.format("delta").mode("append").option("mergeSchema", "true").save(store)
    log.info("fold event store given its base columns", extra={"projection": projection, "store": store})


def read_bases(session: SparkSession, store: str, key: str, keys: DataFrame) -> DataFrame:
    """The base seq (`_base_seq`) of those of the keys that have a base row."""
    listed = touched_keys(keys, key)
    assert listed is not None
    found = (
        session.read.format("delta")
        .load(store)
        .where(listed.on(F.col(key)) & F.col(BASE))
        .join(keys, key, "left_semi")
        .select(key, F.col("seq").alias("_base_seq"))
    )
    # At most one row per key: read once, not again by the MERGE into the store that it filters.
    return session.createDataFrame(found.collect(), found.schema)


def compact(session: SparkSession, path: str, key: str, beyond: Column, folder: KeyFolder) -> int:
    """Compact each key's seq-prefix of kept events `beyond` the horizon's floor into its base row, in one commit;
    return how many rows went.

    Decided from the store and the floor alone, and a key already compacted is left alone: run again after a
    crash, it makes the same commit or none."""
    from delta.tables import DeltaTable

    store = session.read.format("delta").load(path)
    is_base = F.coalesce(F.col(BASE), F.lit(False))
    behind = beyond | is_base
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
        based = prefix.rdd.map(lambda row: (row[key], row)).groupByKey().map(folder.base)
        new_bases = session.createDataFrame(
            based,
            StructType([store.schema[key], StructField("_base_seq", LongType(), False), store.schema[BASE_STATE]]),
        )
        merge = (
            DeltaTable.forPath(session, path)
            .alias("t")
            .merge(
                prefix.select(key, "seq").join(new_bases, key).alias("s"),
                f"t.seq BETWEEN {low} AND {high} AND t.seq = s.seq AND t.`{key}` = s.`{key}`",
            )
            # The prefix's last event becomes the key's base; the rest of it, an older base too, goes.
            .whenMatchedUpdate(
                condition="t.seq = s._base_seq",
                set={BASE: F.lit(True), BASE_STATE: F.col(f"s.{BASE_STATE}")},
            )
            .whenMatchedDelete()
        )
        merge.execute()
    finally:
        prefix.unpersist()
    return int(rows) - int(keys)  # each key's prefix less the row that became its base
