"""The progress record of a projection: how far it has read and applied, for readers asking how fresh it is.

A small JSON file at `<lake>/_progress/<name>.json`, rewritten after each applied micro-batch. Offsets are
the next offset to read per topic partition; they, the highest seq and the last event time only move forward
(a replay from an older offset does not make the table older than it is). The build that creates the record
notes where the table's history starts (`projections.history`); from then on the oldest event time applied is
kept too, so readers know what the table can hold.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from projections.lake import Lake, read_text, write_text


@dataclass(frozen=True)
class BatchStats:
    """What one micro-batch held, per topic partition and overall."""

    next_offsets: dict[str, dict[str, int]]
    rows: int
    applied: int
    quarantined: int
    ignored: int
    min_seq: int | None
    max_seq: int | None
    last_event_time: str | None  # ISO 8601 in UTC, microsecond precision, so strings compare as times
    first_event_time: str | None = None
    # Events refused for being behind the deduplication horizon (projections.horizon).
    beyond_horizon: int = 0


@dataclass(frozen=True)
class Progress:
    """The projection's progress record, as stored."""

    projection: str
    kind: str
    table: str
    batch_id: int = -1
    updated_at: str | None = None
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    max_seq: int | None = None
    last_event_time: str | None = None
    last_batch: dict[str, int] = field(default_factory=dict)
    events_beyond_horizon: int = 0
    #: The lowest seq of the last batch that had a valid event: where the next batch's MERGE guesses its events
    #: start (`projections.applier.FromGuess`).
    last_batch_min_seq: int | None = None
    #: Where the table's history starts (`HistoryStart.as_record`), noted by the build that created this record;
    #: None for a record written before it was noted.
    history: dict[str, Any] | None = None
    #: The oldest event time applied since the history was noted: the table holds nothing older. None when not
    #: noted (an older record) or before the first event.
    oldest_event_time: str | None = None

    def advanced(self, batch_id: int, stats: BatchStats, now: datetime | None = None) -> Progress:
        """The record after one more batch: positions only move forward."""
        offsets = {topic: dict(parts) for topic, parts in self.offsets.items()}
        for topic, parts in stats.next_offsets.items():
            known = offsets.setdefault(topic, {})
            for partition, offset in parts.items():
                known[partition] = max(known.get(partition, 0), offset)
        return Progress(
            projection=self.projection,
            kind=self.kind,
            table=self.table,
            batch_id=batch_id,
            updated_at=(now or datetime.now(UTC)).isoformat(),
            offsets={
                t: dict(sorted(p.items(), key=lambda kv: int(kv[0]))) for t, p in sorted(offsets.items())
            },
            max_seq=_max(self.max_seq, stats.max_seq),
            last_event_time=_max(self.last_event_time, stats.last_event_time),
            last_batch={
                "rows": stats.rows,
                "applied": stats.applied,
                "quarantined": stats.quarantined,
                "ignored": stats.ignored,
                "beyond_horizon": stats.beyond_horizon,
            },
            # A batch run again after a failure is counted once.
            events_beyond_horizon=self.events_beyond_horizon
            + (stats.beyond_horizon if batch_id != self.batch_id else 0),
            last_batch_min_seq=self.last_batch_min_seq if stats.min_seq is None else stats.min_seq,
            history=self.history,
            # Only with a noted history: a record from before would otherwise claim its first batch's oldest event.
            oldest_event_time=(_min(self.oldest_event_time, stats.first_event_time) if self.history is not None
                               else None),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Progress:
        data: dict[str, Any] = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _min(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def read_progress(lake: Lake, name: str, spark: Any = None) -> Progress | None:
    """The stored progress record of a projection, or None before its first batch."""
    text = read_text(lake.progress(name), spark)
    return Progress.from_json(text) if text else None


def write_progress(lake: Lake, progress: Progress, spark: Any = None) -> None:
    write_text(lake.progress(progress.projection), progress.to_json(), spark)
