"""The quarantine: events a projection could not apply, with the error, their Kafka coordinates and raw bytes.

One Delta table per projection at `<lake>/_quarantine/<name>`. A record is kept once per (topic, partition,
offset), so a replay does not duplicate it. Fix the producer or the declaration, then replay the projection.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from projections.envelope import ERROR
from projections.kinds.base import ensure_table
from projections.kinds.event_log import HEADERS_TYPE
from projections.txn import Txn

SCHEMA: Final = StructType(
    [
        StructField("projection", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("kafka_timestamp", TimestampType(), True),
        StructField("aggregate_id", StringType(), True),
        StructField("event_id", StringType(), True),
        StructField("event_type", StringType(), True),
        StructField("seq_text", StringType(), True),
        StructField("occurred_at_text", StringType(), True),
        StructField("error", StringType(), False),
        StructField("payload", StringType(), True),
        StructField("value", BinaryType(), True),
        StructField("headers", HEADERS_TYPE, True),
        StructField("batch_id", LongType(), False),
        StructField("quarantined_at", TimestampType(), False),
    ]
)


def set_aside(session: SparkSession, path: str, projection: str, bad: DataFrame, txn: Txn) -> None:
    """Add the batch's bad records (decoded rows with `_error`) to the quarantine table, each once."""
    rows = bad.withColumns(
        {
            "projection": F.lit(projection),
            "error": F.col(ERROR),
            "batch_id": F.lit(txn.version).cast("bigint"),
            "quarantined_at": F.current_timestamp(),
        }
    ).select(*SCHEMA.fieldNames())
    add(session, path, projection, rows, txn)


def add(session: SparkSession, path: str, projection: str, rows: DataFrame, txn: Txn | None = None) -> None:
    """Merge quarantine rows (SCHEMA) into the table at `path`, creating it, keeping each record once."""
    from delta.tables import DeltaTable

    ensure_table(session, path, SCHEMA, f"quarantine of projection {projection}")
    merge = (
        DeltaTable.forPath(session, path)
        .alias("t")
        .merge(rows.alias("s"), "t.topic = s.topic AND t.partition = s.partition AND t.offset = s.offset")
        .whenNotMatchedInsertAll()
    )
    if txn is None:
        merge.execute()
        return
    with txn.applied_once(session):
        merge.execute()
