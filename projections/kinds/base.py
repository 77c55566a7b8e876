"""What every projection kind offers: its tables' schemas and how it applies one micro-batch of events."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructField, StructType

from projections.declaration import DEFAULT_KEY, ResolvedPayload
from projections.horizon import DedupHorizon, Floor

if TYPE_CHECKING:
    from projections.declaration import Projection
    from projections.lake import Lake
    from projections.txn import Txn

# No compaction inside each micro-batch's commit (it made every batch slower on local[2]; B5 in
# docs/BENCHMARKS.md): small files are compacted by `outbox-projections maintain` (OPTIMIZE) instead.
TABLE_PROPERTIES: Final = {
    "delta.autoOptimize.optimizeWrite": "false",
    "delta.autoOptimize.autoCompact": "false",
}


@dataclass(frozen=True)
class Batch:
    """One micro-batch, ready to apply: its valid events (never none), where its tables live, its Txn.

    `seq_range` is the lowest and highest seq among the events; kinds keyed by seq use it to let Delta
    skip files that cannot match.
    """

    session: SparkSession
    batch_id: int
    projection: Projection
    payload: ResolvedPayload
    lake: Lake
    txn: Txn
    events: DataFrame
    seq_range: tuple[int, int]

    @property
    def table(self) -> str:
        return self.lake.table(self.projection.name)


class Kind(ABC):
    """A projection kind. Implementations are frozen dataclasses holding the kind's own options."""

    name: ClassVar[str]
    # What a table built from a starting point later than `earliest` lacks, for the replay's refusal.
    lost_by_a_later_start: ClassVar[str]

    def validate(self, projection: Projection) -> None:  # noqa: B027 - most kinds have nothing to check
        """Raise DeclarationError when the declaration does not suit this kind."""

    @abstractmethod
    def table_schema(self, projection: Projection, payload: ResolvedPayload) -> StructType:
        """The schema of the projection's table."""

    def tables(
        self, projection: Projection, payload: ResolvedPayload, lake: Lake
    ) -> Mapping[str, StructType]:
        """Every Delta table this kind writes, by path; the runner creates them before the stream starts."""
        return {lake.table(projection.name): self.table_schema(projection, payload)}

    def check_tables(self, session: SparkSession, projection: Projection, lake: Lake) -> None:  # noqa: B027
        """Raise RefusedError when existing tables cannot be continued safely; called before any is created."""

    @abstractmethod
    def apply(self, batch: Batch) -> None:
        """Apply the batch's events to the tables, each write inside `batch.txn.applied_once(...)`."""

    def live_rows(self, table: DataFrame) -> DataFrame:
        """What readers should see of the table (tombstones filtered out, for kinds that keep them)."""
        return table

    def purge_condition(self) -> str | None:
        """A SQL predicate selecting rows `maintain` may delete (expired tombstones), or None."""
        return None

    def dedup_horizon(self) -> DedupHorizon | None:
        """How far back this kind recognises a duplicate event id, or None when it keeps no such state."""
        return None

    def beyond_horizon(self, floor: Floor) -> Column:
        """Which of a batch's events are behind the horizon's floor (they are refused, not applied)."""
        if floor.seq is not None:
            return F.col("seq") < F.lit(floor.seq)
        if floor.time is not None:
            return F.col("occurred_at") < F.lit(floor.time)
        return F.lit(False)

    def prune(self, session: SparkSession, projection: Projection, lake: Lake, floor: Floor) -> int:
        """Delete deduplication state behind the floor; return the rows deleted."""
        return 0


def key_field(projection: Projection, payload: ResolvedPayload) -> StructField:
    """The table's key column: aggregate_id (a string) or the payload field named by `projection.key`."""
    if projection.key == DEFAULT_KEY:
        return StructField(DEFAULT_KEY, StringType(), False)
    data_type: DataType = payload.columns[projection.key].dataType
    return StructField(projection.key, data_type, False)


def value_fields(projection: Projection, payload: ResolvedPayload) -> list[StructField]:
    """Payload columns other than the key, all nullable (an event type need not declare each of them)."""
    return [f for f in payload.columns.fields if f.name != projection.key]


def ensure_table(session: SparkSession, path: str, schema: StructType, comment: str) -> None:
    """Create the Delta table at `path` unless it exists (a changed declaration needs a new table)."""
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(session).location(path).addColumns(schema).comment(comment)
    for key, value in TABLE_PROPERTIES.items():
        builder = builder.property(key, value)
    builder.execute()
