"""What the active instance reports with each persist: into `bridge_offsets.status` (read by
`outbox-bridge status`) and onto its gauges."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from bridge.core.watermark import AckTracker
from bridge.metrics import BridgeMetrics
from bridge.store.reader import OutboxReader

#: A transaction holding the horizon back this long is worth a warning; shorter ones are ordinary commits.
LONG_TRANSACTION_S = 10.0


def holder_age_s(holder: dict[str, Any] | None) -> float | None:
    """How long the horizon holder's transaction has run, when the holder says when it started."""
    if holder is None or not holder.get("started_at"):
        return None
    return (datetime.now(UTC) - datetime.fromisoformat(holder["started_at"])).total_seconds()


def report(tracker: AckTracker, reader: OutboxReader, metrics: BridgeMetrics, **extra: Any) -> dict[str, Any]:
    """Head, lag, in-flight counts and the horizon holder, set on the gauges and returned as a status."""
    head = reader.head_seq()
    oldest = reader.oldest_after(tracker.watermark)
    lag_seconds = max(0.0, time.time() - oldest.occurred_at.timestamp()) if oldest is not None else 0.0
    holder = reader.horizon_holder()
    metrics.head_seq.set(head)
    metrics.watermark_seq.set(tracker.watermark)
    metrics.lag_events.set(max(0, head - tracker.watermark))
    metrics.lag_seconds.set(lag_seconds)
    metrics.in_flight_events.set(tracker.in_flight_count)
    metrics.in_flight_bytes.set(tracker.in_flight_bytes)
    age = holder_age_s(holder)
    if age is not None:
        metrics.horizon_oldest_xact_age_seconds.set(age)
    elif holder is None:
        metrics.horizon_oldest_xact_age_seconds.set(0)
    return {
        "watermark": tracker.watermark,
        "head_seq": head,
        "lag_events": max(0, head - tracker.watermark),
        "lag_seconds": round(lag_seconds, 3),
        "in_flight": tracker.in_flight_count,
        "unacked": tracker.unacked_count,
        "horizon_holder": holder,
        **extra,
        "updated_at": datetime.now(UTC).isoformat(),
    }
