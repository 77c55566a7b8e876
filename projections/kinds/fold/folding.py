"""Folding one key's events in seq order into its state: plain Python, run on the executors.

The folder is handed a key's rows: its pending events (with the table row they fold onto: `_state`,
`_applied_seq`, `_deleted`), or, for a re-fold, every kept event of the key and its base row (`BASE`), which
holds the state folded up to it. It returns the key's new table row, or, compacting, its new base.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from projections.errors import FoldError

if TYPE_CHECKING:
    from pyspark.sql import Row

State = dict[str, Any]

# Marks a key folded again from its kept events: its row is replaced even if its seq did not grow.
REFOLD = "_refold"
# The event store's base rows: a key's last compacted event, marked `_base`, holding in `_base_state` the
# state folded up to it (null: None, a deleted key). Both nullable: a store written before bases gets
# them on prepare, its rows all events.
BASE = "_base"
BASE_STATE = "_base_state"


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
class KeyFolder:
    """Folds one key's rows in seq order, for its table row or for its base row."""

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
        return (*(values[name] for name in self.columns), bool(first[REFOLD]))

    def base(self, item: tuple[Any, Iterable[Row]]) -> tuple[Any, int, tuple[Any, ...] | None]:
        """The key's compacted rows folded into its new base: the key, the last seq, the state (None: None)."""
        key, rows = item
        ordered = sorted(rows, key=lambda r: int(r["seq"]))
        state = self._fold(key, ordered, None)
        return key, int(ordered[-1]["seq"]), None if state is None else tuple(state.get(n) for n in self.state_names)

    def _fold(self, key: Any, ordered: list[Row], state: State | None) -> State | None:
        for row in ordered:
            if row[BASE]:
                state = None if row[BASE_STATE] is None else row[BASE_STATE].asDict(recursive=True)
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
