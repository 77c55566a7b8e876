"""What the kinds build their tables from: the key and value columns, and creating a Delta table.

The interface every kind implements, `Kind`, is in `projections.kind`.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StringType, StructField, StructType

from projections.kind import Batch, Declaration
from projections.payload import DEFAULT_KEY, TRACE_ID, ResolvedPayload

#: Commits between two Delta checkpoints of a projection's table (Delta's default is 10). Delta writes the
#: checkpoint inside the commit that reaches it, so with one commit per micro-batch every tenth batch took 0.5 to
#: 0.9 s longer (B6's tail); the commits in between cost no more with 100 (Delta keeps a small table's file list
#: in each commit's .crc), and a reader that opens the table cold replays up to 99 small JSON commits instead of
#: 9: about 0.2 s more at 60 (`bench/analysis.md`, #33).
CHECKPOINT_INTERVAL: Final = 100

# No compaction inside each micro-batch's commit (it made every batch slower on local[2]; B5 in
# docs/BENCHMARKS.md): small files are compacted by `outbox-projections maintain` (OPTIMIZE) instead.
TABLE_PROPERTIES: Final = {
    "delta.autoOptimize.optimizeWrite": "false",
    "delta.autoOptimize.autoCompact": "false",
    "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
}


def key_field(projection: Declaration, payload: ResolvedPayload) -> StructField:
    """The table's key column: aggregate_id (a string) or the payload field named by `projection.key`."""
    if projection.key == DEFAULT_KEY:
        return StructField(DEFAULT_KEY, StringType(), False)
    data_type: DataType = payload.columns[projection.key].dataType
    return StructField(projection.key, data_type, False)


def value_fields(projection: Declaration, payload: ResolvedPayload) -> list[StructField]:
    """Payload columns other than the key, all nullable (an event type need not declare each of them)."""
    return [f for f in payload.columns.fields if f.name != projection.key]


def trace_id_field() -> StructField:
    """The trace id column a declaration may turn on: null for an event written outside a trace."""
    return StructField(TRACE_ID, StringType(), True)


def ensure_table(session: SparkSession, path: str, schema: StructType, comment: str) -> None:
    """Create the Delta table at `path` unless it exists (a changed declaration needs a new table, except for the
    trace id column: turned on for an existing table, it is added, null in the rows written before)."""
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(session).location(path).addColumns(schema).comment(comment)
    for key, value in TABLE_PROPERTIES.items():
        builder = builder.property(key, value)
    builder.execute()
    if TRACE_ID in schema.fieldNames() and TRACE_ID not in session.read.format("delta").load(path).columns:
        session.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({TRACE_ID} STRING)")


def highest_seq(session: SparkSession, path: str) -> int | None:
    """The highest seq in the Delta table at `path`, None when it is empty. Delta answers MAX from the files'
    statistics in its log, without reading them (`OptimizeMetadataOnlyDeltaQuery`)."""
    from pyspark.sql import functions as F

    row = session.read.format("delta").load(path).agg(F.max("seq")).first()
    return None if row is None or row[0] is None else int(row[0])


def insert_new(batch: Batch, path: str, rows: DataFrame, match: str) -> None:
    """Insert the `rows` (alias `s`) that the Delta table at `path` (alias `t`) lacks by `match`, once per batch.

    Only rows of the batch's seq range are compared: a replayed event keeps its seq, so Delta skips older
    events' files by their stats. A batch Spark runs again inserts nothing twice (`Txn`).
    """
    from delta.tables import DeltaTable

    assert batch.seq_range is not None, "insert_new needs the batch's seq range (counts_while_applying is off)"
    low, high = batch.seq_range
    merge = (
        DeltaTable.forPath(batch.session, path)
        .alias("t")
        .merge(rows.alias("s"), f"t.seq BETWEEN {low} AND {high} AND {match}")
        .whenNotMatchedInsertAll()
    )
    with batch.txn.applied_once(batch.session):
        merge.execute()
