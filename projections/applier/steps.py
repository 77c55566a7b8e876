"""The steps the apply paths share: the events a kind reads, the kind's `Batch`, setting bad records aside, and
the deduplication horizon's part of a batch (its floor, the events behind it refused, the state behind it pruned).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame

from projections.declaration import Projection
from projections.envelope import ENVELOPE, ERROR
from projections.horizon import DedupHorizon, Floor
from projections.kind import Batch
from projections.lake import Lake
from projections.observed import bad, valid
from projections.payload import TRACE_ID, ResolvedPayload
from projections.progress import Progress
from projections.quarantine import set_aside
from projections.txn import Txn

# The applier's one logger, whichever of its modules logs: the name its log lines carry and operators filter on.
log = logging.getLogger("projections.applier")

_EVENT_COLUMNS = [
    c for c in ENVELOPE if c not in ("value", "seq_text", "occurred_at_text", "kafka_timestamp")
]


class Steps:
    """The steps of applying a batch to one projection's tables; they keep nothing from one batch to the next."""

    def __init__(self, projection: Projection, payload: ResolvedPayload, lake: Lake, app_id: str) -> None:
        self.projection = projection
        self.payload = payload
        self.lake = lake
        self.app_id = app_id
        horizon = projection.kind.dedup_horizon()
        #: None for a kind that keeps no deduplication state.
        self.guard = None if horizon is None else HorizonGuard(projection, payload, lake, horizon)

    def txn(self, batch_id: int, suffix: str = "") -> Txn:
        """The `Txn` of the batch's writes; a second write to the same table takes an app id `suffix` of its own."""
        return Txn(self.app_id + suffix, batch_id)

    def events(self, decoded: DataFrame) -> DataFrame:
        """The records to apply, as the kinds read them: envelope and payload columns of the valid ones."""
        kept = [TRACE_ID] if self.projection.trace_id else []
        return decoded.where(valid()).select(*_EVENT_COLUMNS, *kept, *self.payload.columns.fieldNames())

    def batch(self, session: Any, txn: Txn, events: DataFrame, seq_range: tuple[int, int] | None) -> Batch:
        return Batch(
            session=session,
            batch_id=txn.version,
            projection=self.projection,
            payload=self.payload,
            lake=self.lake,
            txn=txn,
            events=events,
            seq_range=seq_range,
        )

    def quarantine(self, decoded: DataFrame, batch_id: int, count: int, txn: Txn) -> None:
        records = decoded.where(bad())
        _log_quarantined(self.projection.name, batch_id, records, count)
        set_aside(
            decoded.sparkSession, self.lake.quarantine(self.projection.name), self.projection.name, records, txn
        )


class HorizonGuard:
    """The deduplication horizon's part of a batch, for a kind that has one."""

    def __init__(
        self, projection: Projection, payload: ResolvedPayload, lake: Lake, horizon: DedupHorizon
    ) -> None:
        self.projection = projection
        self.payload = payload
        self.lake = lake
        self.horizon = horizon

    def floor(self, recorded: Progress) -> Floor:
        # From what was applied before this batch, not the batch's own newest event: a batch spanning more
        # than the horizon (the first one of a replay) keeps all of its events. A batch that Spark runs again
        # after its progress was recorded gets a higher floor, but changes nothing: the record is written
        # after every table write of the batch, and those are skipped on the retry (Txn).
        return self.horizon.floor(recorded.max_seq, event_time(recorded.last_event_time))

    def refuse(self, events: DataFrame, floor: Floor, batch_id: int) -> int:
        """Count and log the events behind the floor (refused: the caller leaves them out)."""
        behind = self.projection.kind.beyond_horizon(floor)
        refused = events.where(behind).count()
        if not refused:
            return 0
        sample = [
            {"event_id": r["event_id"], "seq": r["seq"], "topic": r["topic"], "partition": r["partition"],
             "offset": r["offset"]}
            for r in events.where(behind).select("event_id", "seq", "topic", "partition", "offset")
            .limit(5)
            .collect()
        ]
        log.warning(
            "events behind the deduplication horizon refused (not applied)",
            extra={
                "projection": self.projection.name,
                "batch_id": batch_id,
                "count": refused,
                "horizon": self.horizon.describe(),
                "floor_seq": floor.seq,
                "floor_time": floor.time.isoformat() if floor.time else None,
                "sample": sample,
            },
        )
        return refused

    def prune(self, session: Any, floor: Floor, batch_id: int) -> None:
        pruned = self.projection.kind.prune(session, self.projection, self.payload, self.lake, floor)
        if not pruned:
            return
        log.info(
            "deduplication state pruned",
            extra={
                "projection": self.projection.name,
                "batch_id": batch_id,
                "rows": pruned,
                "horizon": self.horizon.describe(),
                "floor_seq": floor.seq,
                "floor_time": floor.time.isoformat() if floor.time else None,
            },
        )


class Clock:
    """Adds the seconds since its last lap to `phases[name]`."""

    def __init__(self, phases: dict[str, float]) -> None:
        self._phases = phases
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self._phases[name] = round(self._phases.get(name, 0.0) + now - self._last, 3)
        self._last = now


def event_time(text: str | None) -> datetime | None:
    """An event time as the batch's counts and the progress record hold it (ISO 8601), None when absent."""
    return datetime.fromisoformat(text) if text else None


def _log_quarantined(projection: str, batch_id: int, records: DataFrame, count: int) -> None:
    sample = [
        {"topic": r["topic"], "partition": r["partition"], "offset": r["offset"], "error": r[ERROR]}
        for r in records.select("topic", "partition", "offset", ERROR).limit(5).collect()
    ]
    log.warning(
        "events quarantined",
        extra={"projection": projection, "batch_id": batch_id, "count": count, "sample": sample},
    )
