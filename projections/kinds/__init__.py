"""Projection kinds: how a micro-batch of events changes a projection's Delta tables."""

from projections.kind import Batch, Kind
from projections.kinds.event_log import EventLog
from projections.kinds.fold import Event, Fold, FoldFunction, State
from projections.kinds.history import History
from projections.kinds.latest_state import LatestState
from projections.kinds.windowed_counts import WindowedCounts

__all__ = [
    "Batch",
    "Event",
    "EventLog",
    "Fold",
    "FoldFunction",
    "History",
    "Kind",
    "LatestState",
    "State",
    "WindowedCounts",
]
