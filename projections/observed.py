"""Counting a micro-batch while the kind's MERGE reads it, instead of in a Spark job of its own first.

The applier's `source` puts Spark's streaming observation (`DataFrame.observe`) on the decoded stream of a
kind whose batches are read once (`Kind.reads_batches_once`). Its aggregates are computed by the tasks that
read the batch, whichever action runs them: in the applier, that is the kind's first MERGE, which
materializes its source once. The applier then reads them from the batch's query execution
(`BatchObservation.metrics`) as soon as the MERGE has returned, before anything else reads the batch again
(each further read of the batch adds to them). The end offsets come from the query's offset log, which Spark
writes before it runs the batch (`end_offsets`).

What the observation did not count is counted in a Spark job of its own (`count_batch`, which the two-pass
path uses for every batch): a batch whose MERGE was skipped because it had landed before (`Txn`) reads
nothing, so it shows no rows; a batch without an observation for it (another Spark) shows None.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql import Column
from pyspark.sql import functions as F

from projections.envelope import ERROR, RELEVANT
from projections.lake import read_text
from projections.progress import BatchStats

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The observation's name in the query's progress (`observedMetrics`), where Spark reports it after each batch.
NAME: Final = "projection_batch"
_ISO: Final = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


def valid() -> Column:
    """Records the projection handles and can apply."""
    return F.col(RELEVANT) & F.col(ERROR).isNull()


def bad() -> Column:
    """Records the projection handles but cannot apply: they go to quarantine."""
    return F.col(RELEVANT) & F.col(ERROR).isNotNull()


def counts() -> list[Column]:
    """What a batch held, as aggregates over its decoded records (per topic partition in `count_batch`)."""
    ok = valid()
    return [
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(ok, 1)).alias("applied"),
        F.count(F.when(bad(), 1)).alias("quarantined"),
        F.min(F.when(ok, F.col("seq"))).alias("min_seq"),
        F.max(F.when(ok, F.col("seq"))).alias("max_seq"),
        F.date_format(F.max(F.when(ok, F.col("occurred_at"))), _ISO).alias("last_event_time"),
        F.date_format(F.min(F.when(ok, F.col("occurred_at"))), _ISO).alias("first_event_time"),
    ]


class BatchObservation:
    """The streaming observation of one query's batches, read by the batch function while the batch runs."""

    def __init__(self, spark: SparkSession, query_name: str) -> None:
        self._spark = spark
        self.query_name = query_name

    def attach(self, decoded: DataFrame) -> DataFrame:
        """The decoded stream with the observation on it: what the query hands to its batch function."""
        return decoded.observe(NAME, *counts())

    def metrics(self, batch_id: int) -> dict[str, Any] | None:
        """What the batch's tasks have counted so far, or None when this batch's execution is not found.

        Reads Spark's own query execution of the running batch (`StreamExecution.lastExecution`, set before the
        batch function is called): PySpark has no public way to read a streaming observation before the batch
        ends.
        """
        try:
            execution = self._execution(batch_id)
            if execution is None:
                return None
            found = execution.observedMetrics().get(NAME)
            if found.isEmpty():
                return None
            row = found.get()
            names = list(row.schema().fieldNames())
            return {name: row.get(i) for i, name in enumerate(names)}
        except Exception:  # a Spark without these internals: the applier counts the batch itself
            log.warning(
                "the batch's observation could not be read; it is counted in a job of its own",
                extra={"query": self.query_name, "batch_id": batch_id},
                exc_info=True,
            )
            return None

    def _execution(self, batch_id: int) -> Any:
        active = self._spark._jsparkSession.streams().active()
        for query in active:
            if query.name() == self.query_name:
                execution = query.streamingQuery().lastExecution()
                if execution is not None and int(execution.currentBatchId()) == batch_id:
                    return execution
        return None


def end_offsets(checkpoint: str, batch_id: int, spark: SparkSession | None = None) -> dict[str, dict[str, int]] | None:
    """The next offset to read per topic partition after this batch, from the query's offset log; None without
    a readable entry."""
    text = read_text(f"{checkpoint.rstrip('/')}/offsets/{batch_id}", spark)
    if not text:
        return None
    offsets: dict[str, dict[str, int]] = {}
    try:
        # "v1", the batch's metadata, then one line per source: {"topic": {"partition": offset}}.
        for line in text.splitlines()[2:]:
            for topic, parts in json.loads(line).items():
                offsets.setdefault(topic, {}).update({str(p): int(o) for p, o in parts.items()})
    except (ValueError, AttributeError, TypeError):
        log.warning("offset log entry not understood", extra={"checkpoint": checkpoint, "batch_id": batch_id})
        return None
    return offsets


def count_batch(decoded: DataFrame) -> BatchStats:
    """Count a decoded batch in a Spark job of its own: the counts per topic partition, and the end offsets."""
    rows = decoded.groupBy("topic", "partition").agg(F.max("offset").alias("max_offset"), *counts()).collect()
    offsets: dict[str, dict[str, int]] = {}
    for r in rows:
        offsets.setdefault(r["topic"], {})[str(r["partition"])] = int(r["max_offset"]) + 1

    def present(column: str) -> list[Any]:
        return [r[column] for r in rows if r[column] is not None]

    combined = {
        **{c: sum(int(r[c]) for r in rows) for c in ("rows", "applied", "quarantined")},
        "min_seq": min(present("min_seq"), default=None),
        "max_seq": max(present("max_seq"), default=None),
        "last_event_time": max(present("last_event_time"), default=None),
        "first_event_time": min(present("first_event_time"), default=None),
    }
    return batch_stats(combined, offsets)


def batch_stats(counted: dict[str, Any], offsets: dict[str, dict[str, int]]) -> BatchStats:
    """The stats of a batch from its counts (`observed.counts`, over the whole batch) and its end offsets."""
    rows, applied, bad = int(counted["rows"]), int(counted["applied"]), int(counted["quarantined"])
    return BatchStats(
        next_offsets=offsets,
        rows=rows,
        applied=applied,
        quarantined=bad,
        ignored=rows - applied - bad,
        min_seq=_int(counted["min_seq"]),
        max_seq=_int(counted["max_seq"]),
        last_event_time=counted["last_event_time"],
        first_event_time=counted["first_event_time"],
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
