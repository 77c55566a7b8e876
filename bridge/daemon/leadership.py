"""Leadership of one bridge name: stand by until the lease is free, take it, renew it, give it up.

The lease lives in the database (`bridge.store.offsets`), measured by the database's clock. This instance's
own view is a monotonic deadline, counted from before each renewal was sent: the daemon may send only
while `may_send()`, checked before every record, so a pause, a slow read or a slow admin call that
outlasts the lease stops publishing before a standby can take over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from bridge.metrics import BridgeMetrics
from bridge.store.dead_letters import DeadLetter
from bridge.store.lease import Lease, LeaseStore

log = logging.getLogger("bridge.daemon")


class Leadership:
    """The lease of one bridge name, for one instance."""

    def __init__(self, offsets: LeaseStore, instance_id: str, lease_timeout_s: float,
                 metrics: BridgeMetrics) -> None:
        self.offsets = offsets
        self.instance_id = instance_id
        self.lease_timeout_s = lease_timeout_s
        self._metrics = metrics
        self.lease: Lease | None = None
        #: When this instance took the lease it holds (wall clock, UTC), for `status` and `doctor`.
        self.since: datetime | None = None
        self._deadline = 0.0

    @property
    def leading(self) -> bool:
        return self.lease is not None

    def acquire(self, stop: threading.Event, standing_by: threading.Event,
                on_standing_by: Callable[[], None] = lambda: None) -> Lease | None:
        """Stand by until the lease is free (another instance died or stopped), then take it; None if
        `stop` is set first. `standing_by` is set once this instance is a healthy standby, when
        `on_standing_by` runs too."""
        announced = False
        while not stop.is_set():
            started = time.monotonic()
            lease = self.offsets.try_acquire(self.instance_id, self.lease_timeout_s)
            if lease is not None:
                log.info("took the lease", extra={"bridge": lease.bridge_name, "epoch": lease.epoch,
                                                   "watermark": lease.watermark, "instance": self.instance_id})
                self._took(lease, started)
                return lease
            if not announced:
                log.info("another instance holds the lease; standing by", extra={"instance": self.instance_id})
                announced = True
                on_standing_by()
            standing_by.set()
            stop.wait(max(0.2, self.lease_timeout_s / 4))
        return None

    def may_send(self) -> bool:
        """Whether the lease is surely still ours, on this machine's monotonic clock."""
        return time.monotonic() < self._deadline

    def expired(self) -> bool:
        return not self.may_send()

    def renew(self, watermark: int, status: dict[str, Any], *, dead_letters: Sequence[DeadLetter] = ()) -> None:
        """Persist the watermark (and the dead letters it passes) and renew the lease in one fenced write
        (FencedError if another instance took over); the deadline counts from before the write was sent."""
        self._renewed(self.offsets.persist, watermark, status, dead_letters)

    def renew_rewound(self, watermark: int, status: dict[str, Any], *,
                      dead_letters: Sequence[DeadLetter] = ()) -> None:
        """As `renew`, writing a watermark below the stored one: after a rewind to publish late rows."""
        self._renewed(self.offsets.persist_rewound, watermark, status, dead_letters)

    def _renewed(self, persist: Callable[..., None], watermark: int, status: dict[str, Any],
                 dead_letters: Sequence[DeadLetter]) -> None:
        assert self.lease is not None, "renew() without the lease"
        started = time.monotonic()
        persist(self.lease, watermark, self.lease_timeout_s, status, dead_letters=dead_letters)
        self._deadline = started + self.lease_timeout_s
        self._metrics.last_persist_timestamp_seconds.set(time.time())

    def release(self) -> None:
        """Give the lease up after a graceful stop, so a standby takes over at once."""
        if self.lease is not None:
            self.offsets.release(self.lease)

    def lost(self) -> None:
        """Stop counting on the lease (given up, lost, or stopped)."""
        self.lease = None
        self.since = None
        self._deadline = 0.0
        self._metrics.is_leader.set(0)

    def _took(self, lease: Lease, started: float) -> None:
        self.lease = lease
        self.since = datetime.now(UTC)
        self._deadline = started + self.lease_timeout_s
        self._metrics.is_leader.set(1)
        self._metrics.epoch.set(lease.epoch)
