"""What one instance has done and met, across its leadership terms: the counts each persist reports
(`outbox-bridge status`), the last error (`/healthz`, the status), and the errors counter."""

from __future__ import annotations

import logging

from bridge.kafka.access import KafkaAccessError
from bridge.metrics import BridgeMetrics

log = logging.getLogger("bridge.daemon")


class Tally:
    """Holes settled, rewinds applied, deleted seqs passed over, and the last error, for this process."""

    def __init__(self, metrics: BridgeMetrics) -> None:
        self._metrics = metrics
        self.holes_settled = 0
        self.rewinds_applied = 0
        #: Seqs passed over because cleanup deleted them and the operator accepted it (`--start-from`).
        self.deleted_passed = 0
        self.last_error: str | None = None

    def error(self, kind: str, exc: Exception) -> None:
        """Keep `exc` as the last error and count it on `outbox_publish_errors_total{kind}`."""
        self.last_error = str(exc)
        self._metrics.publish_errors.labels(kind=kind).inc()

    def refused(self, exc: KafkaAccessError) -> int:
        """Kafka refused the bridge (credentials, certificate, an ACL): counted and said; its exit code."""
        self.error(type(exc).__name__, exc)
        log.error("Kafka refused the bridge; stopping (retrying cannot fix this)",
                  extra={"error": str(exc), "exit_code": exc.exit_code})
        return exc.exit_code
