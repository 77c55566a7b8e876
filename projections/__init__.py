"""Projections: PySpark Structured Streaming jobs that build idempotent Delta tables from outbox topics.

Declare a `Projection` (name, source topics, event types with payload schemas, kind, key) in a module's
`PROJECTIONS`; `outbox-projections run NAME` (or `runner.start`) reads Kafka with headers, parses payloads,
sets bad events aside in a quarantine table and applies the rest with the kind's guarded MERGE, each
micro-batch once (Delta txnAppId/txnVersion). Kinds: `LatestState`, `EventLog`, `History`, `Fold`,
`WindowedCounts`; `DedupHorizon` bounds what the deduplicating kinds and `Fold` keep.
"""

from projections.declaration import Projection
from projections.horizon import DedupHorizon
from projections.kinds import Event, EventLog, Fold, History, Kind, LatestState, State, WindowedCounts
from projections.payload import PayloadSchema

__all__ = [
    "DedupHorizon",
    "Event",
    "EventLog",
    "Fold",
    "History",
    "Kind",
    "LatestState",
    "PayloadSchema",
    "Projection",
    "State",
    "WindowedCounts",
]
