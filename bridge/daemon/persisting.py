"""What a leader writes with each persist: the watermark, the status `outbox-bridge status` shows, and the
dead letters the watermark passes, in one fenced write that renews the lease; then the dead-letter gauges.

A dead letter is sent when its row is read, and put on record with the first persist whose watermark passes
its seq, in the same transaction: once retention can see the new watermark, it sees the dead letter too. A
persist may run on the checkpoint's worker thread while the loop sends (`bridge.daemon.checkpoints`): the dead
letters not yet on record are kept under a lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from bridge.core.watermark import AckTracker
from bridge.daemon.leadership import Leadership
from bridge.daemon.status import LONG_TRANSACTION_S, holder_age_s, report
from bridge.daemon.tally import Tally
from bridge.metrics import BridgeMetrics
from bridge.store.dead_letters import DeadLetter
from bridge.store.lease import LeaseStore
from bridge.store.reader import OutboxReader

log = logging.getLogger("bridge.daemon")


class Renewal(Protocol):
    """A fenced write of the watermark that renews the lease: `Leadership.renew` or `renew_rewound`."""

    def __call__(self, watermark: int, status: dict[str, Any], *, dead_letters: Sequence[DeadLetter] = ()) -> None:
        ...


class Persisting:
    """The persists of one instance, and the dead letters sent and not yet on record."""

    def __init__(self, leadership: Leadership, offsets: LeaseStore, metrics: BridgeMetrics, tally: Tally,
                 instance_id: str, delivery: str = "at-least-once") -> None:
        self._leadership = leadership
        self._offsets = offsets
        self._metrics = metrics
        self._tally = tally
        self._instance_id = instance_id
        self._delivery = delivery  # BRIDGE_DELIVERY, as the leader runs it
        self._dead_letters: list[DeadLetter] = []
        self._dead_letters_lock = threading.Lock()

    def dead_letter_sent(self, letter: DeadLetter) -> None:
        """A dead letter went to its topic: it is recorded with the first persist past its seq."""
        with self._dead_letters_lock:
            self._dead_letters.append(letter)

    def forget_dead_letters(self, above: int | None = None) -> None:
        """Forget the dead letters not on record above seq `above` (all of them when None): they are sent again
        after a rewind, or, at a new term, the leader that persisted past them recorded them."""
        with self._dead_letters_lock:
            self._dead_letters[:] = [] if above is None else [letter for letter in self._dead_letters
                                                              if letter.seq <= above]

    def persist(self, renew: Renewal, tracker: AckTracker, reader: OutboxReader) -> None:
        """Write the watermark and the status with `renew`, then set the dead-letter gauges."""
        status = self.status(tracker, reader)
        age = holder_age_s(status["horizon_holder"])
        if age is not None and age >= LONG_TRANSACTION_S:
            log.warning("a long transaction holds publishing back", extra={"holder": status["horizon_holder"]})
        self.renew(renew, tracker.watermark, status)
        self._report_dead_letters()

    def status(self, tracker: AckTracker, reader: OutboxReader) -> dict[str, Any]:
        since = self._leadership.since
        tally = self._tally
        return report(tracker, reader, self._metrics, instance=self._instance_id, delivery=self._delivery,
                      holes_settled=tally.holes_settled,
                      rewinds_applied=tally.rewinds_applied, last_error=tally.last_error,
                      leading_since=since.isoformat(timespec="seconds") if since else None)

    def renew(self, renew: Renewal, watermark: int, status: dict[str, Any]) -> None:
        """Persist and renew, recording the dead letters the watermark passes in the same write."""
        with self._dead_letters_lock:
            passed = [letter for letter in self._dead_letters if letter.seq <= watermark]
        renew(watermark, status, dead_letters=passed)
        if passed:
            recorded = {id(letter) for letter in passed}
            with self._dead_letters_lock:
                self._dead_letters[:] = [letter for letter in self._dead_letters if id(letter) not in recorded]
            log.info("dead letters on record", extra={"seqs": [letter.seq for letter in passed][:20]})

    def _report_dead_letters(self) -> None:
        """The open dead letters of this name on their gauges: operators resolve them from the CLI."""
        found = self._offsets.open_dead_letters()
        self._metrics.dead_letters_open.set(found.count)
        age = (datetime.now(UTC) - found.oldest_at).total_seconds() if found.oldest_at is not None else 0.0
        self._metrics.dead_letter_oldest_age_seconds.set(max(0.0, age))
