"""What every projection kind offers (`Kind`), and what it is given: a micro-batch (`Batch`) and the
projection's declaration as far as a kind reads it (`Declaration`).

`projections.declaration.Projection` holds a `Kind` and satisfies `Declaration`; the kinds take a
`Declaration`. So the declaration and the kinds both import this module, and neither imports the other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from projections.horizon import DedupHorizon, Floor
from projections.payload import PayloadSchema, ResolvedPayload

if TYPE_CHECKING:
    from projections.lake import Lake
    from projections.txn import Txn


class Declaration(Protocol):
    """What a kind reads of a projection's declaration (`projections.declaration.Projection` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str:
        """The table's key column: aggregate_id or a payload field."""

    @property
    def event_types(self) -> Mapping[str, PayloadSchema]:
        """The handled event types and their payload schemas; empty for every event type."""

    @property
    def handles_every_type(self) -> bool: ...

    @property
    def trace_id(self) -> bool:
        """Whether the table keeps the trace id of the event behind each row (`projections.payload.TRACE_ID`)."""


@dataclass(frozen=True)
class Batch:
    """One micro-batch, ready to apply: its valid events, where its tables live, its Txn.

    `seq_range` is the lowest and highest seq among the events (there is at least one); kinds keyed by seq use
    it to let Delta skip files that cannot match. It is None for a kind that `counts_while_applying`: such a
    batch is applied before it is counted, and may hold no valid event.
    """

    session: SparkSession
    batch_id: int
    projection: Declaration
    payload: ResolvedPayload
    lake: Lake
    txn: Txn
    events: DataFrame
    seq_range: tuple[int, int] | None

    @property
    def table(self) -> str:
        return self.lake.table(self.projection.name)


class Kind(ABC):
    """A projection kind. Implementations are frozen dataclasses holding the kind's own options."""

    name: ClassVar[str]
    # What a table built from a starting point later than `earliest` lacks, for the replay's refusal.
    lost_by_a_later_start: ClassVar[str]
    #: True when `apply` reads `batch.events` once, in the first action it runs (one MERGE, whose source Delta
    #: materializes once), needs no `seq_range`, and the kind has no deduplication horizon (whose floor needs
    #: the batch's lowest seq before anything is written). The applier then counts each batch while that action
    #: reads it (`projections.applier.OnePass`) instead of in a Spark job of its own before `apply`.
    counts_while_applying: ClassVar[bool] = False
    #: True when `apply` reads `batch.events` once, in its first action (as above), and the seq range only
    #: narrows which table files it reads: any range that holds every event of the batch gives the same result.
    #: The applier then guesses the range's low end before it reads the batch (`projections.applier.FromGuess`),
    #: applies the events from there in one pass counted by the observation, and the rest, if any, in a second.
    range_only_prunes: ClassVar[bool] = False
    #: True when each row of the table comes from one event (the latest of its key, or its own), whose trace id a
    #: declaration may keep on it (`Declaration.trace_id`).
    keeps_trace_id: ClassVar[bool] = False

    @property
    def reads_batches_once(self) -> bool:
        """Whether this kind's applier is handed decoded batches that count themselves as they are read
        (`projections.applier.streaming_path`)."""
        return self.counts_while_applying or self.range_only_prunes

    def validate(self, projection: Declaration) -> None:  # noqa: B027 - most kinds have nothing to check
        """Raise DeclarationError when the declaration does not suit this kind."""

    @abstractmethod
    def table_schema(self, projection: Declaration, payload: ResolvedPayload) -> StructType:
        """The schema of the projection's table."""

    def tables(
        self, projection: Declaration, payload: ResolvedPayload, lake: Lake
    ) -> Mapping[str, StructType]:
        """Every Delta table this kind writes, by path; the runner creates them before the stream starts."""
        return {lake.table(projection.name): self.table_schema(projection, payload)}

    def check_tables(self, session: SparkSession, projection: Declaration, lake: Lake) -> None:  # noqa: B027
        """Raise RefusedError when existing tables cannot be continued safely; called before any is created."""

    def upgrade_tables(  # noqa: B027 - most kinds' tables have had one schema only
        self, session: SparkSession, projection: Declaration, payload: ResolvedPayload, lake: Lake
    ) -> None:
        """Bring existing tables written by an earlier version to this one's schema; called once they exist."""

    @abstractmethod
    def apply(self, batch: Batch) -> int:
        """Apply the batch's events to the tables, each write inside `batch.txn.applied_once(...)`.

        Return how many of them the kind refused rather than applied (counted as beyond the horizon)."""

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

    def prune(
        self, session: SparkSession, projection: Declaration, payload: ResolvedPayload, lake: Lake, floor: Floor
    ) -> int:
        """Delete deduplication state behind the floor; return the rows deleted."""
        return 0
