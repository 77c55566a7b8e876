"""Retention while leading: delete published rows older than `BRIDGE_RETENTION`, beside publishing.

The same work as `outbox-bridge cleanup --older-than` (small batches, never above the persisted
watermark), every `retention_interval_s`, on its own thread and connections, and only while this
instance holds the lease.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from bridge.config import RetentionSection
from bridge.metrics import BridgeMetrics

log = logging.getLogger("bridge.daemon")


class Retention:
    """A background thread that runs retention passes while `leading()` says so."""

    def __init__(self, section: RetentionSection, delete_pass: Callable[[timedelta], dict[str, Any]],
                 metrics: BridgeMetrics, leading: Callable[[], bool], stop: threading.Event,
                 on_error: Callable[[str, Exception], None]) -> None:
        self._section = section
        self._delete_pass = delete_pass
        self._metrics = metrics
        self._leading = leading
        self._stop = stop
        self._on_error = on_error
        self.passes = 0
        metrics.retention_hold_alert_after_seconds.set(section.hold_alert_after_s)

    def start(self) -> None:
        threading.Thread(target=self._run, name="outbox-retention", daemon=True).start()

    def _run(self) -> None:
        interval = self._section.interval_s
        while not self._stop.wait(interval):
            if not self._leading():
                continue
            try:
                result = self._delete_pass(self._section.period)
            except Exception as exc:  # noqa: BLE001 - a failed pass is retried next interval; publishing goes on
                self._on_error("retention", exc)
                log.warning("retention pass failed; retrying next interval",
                            extra={"error": str(exc), "retry_in_s": interval})
                continue
            self.passes += 1
            self._metrics.retention_deleted.inc(result["deleted"])
            self._held_back(result)
            if result["deleted"]:
                log.info("retention pass", extra={"deleted": result["deleted"], "watermark": result["watermark"],
                                                  "cutoff": result["cutoff"]})

    def _held_back(self, result: dict[str, Any]) -> None:
        """Name the bridge name that keeps rows this one has published, and for how long, on the gauge and
        in the log (a warning once it is past `hold_alert_after_s`)."""
        gauge = self._metrics.retention_held_back_seconds
        gauge.clear()
        holder = result.get("held_back_by")
        if holder is None or not result.get("held_back_rows"):
            return
        waited = float(result["held_back_for_s"])
        gauge.labels(held_by=holder).set(waited)
        late = waited >= self._section.hold_alert_after_s
        (log.warning if late else log.info)(
            "retention held back by another bridge name: it has not published rows this one has",
            extra={"held_by": holder, "its_watermark": result["held_back_at"], "rows": result["held_back_rows"],
                   "waiting_s": round(waited), "fix": "start that bridge, or retire its name if it is gone for good: "
                   f"`outbox-bridge names retire {holder} --reason ...`"})
