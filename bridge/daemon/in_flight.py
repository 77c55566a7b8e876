"""The records a term has handed to the producer, and what their delivery reports do.

A report acknowledges its record (the ack tracker may move the watermark, the event counts as published),
or refuses it: for its content (a suspect to send again alone, or a culprit for the poison policy:
`bridge.core.refusals`), or for lack of an ACL (the term stops; `refusal`). Reports of a producer the term
has since discarded carry an older generation and are ignored.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

from bridge.core.records import KafkaRecord, OutboxRow
from bridge.core.refusals import Refusals
from bridge.core.watermark import AckTracker
from bridge.daemon.poison import PoisonGate
from bridge.kafka.access import BRIDGE_TOPICS, KafkaAccessError, delivery_refused, denied
from bridge.kafka.publisher import DeliveryFailure
from bridge.metrics import BridgeMetrics

#: Delivery errors about the records, not the cluster: sending them again fails again. The broker
#: refuses a whole batch, so each record it named is sent again alone (after everything before it is
#: acknowledged); one refused alone goes to the poison policy instead of being retried forever.
RECORD_REFUSED = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_MSG_SIZE,
})


@dataclass(slots=True)
class _Sent:
    """What the delivery report needs to know about a record in flight."""

    topic: str
    occurred_at: float


class InFlight:
    """The records of one term in flight, by seq, with the tracker their acks move."""

    def __init__(self, tracker: AckTracker, refusals: Refusals, gate: PoisonGate, metrics: BridgeMetrics,
                 kafka_conf: Mapping[str, Any]) -> None:
        self.tracker = tracker
        self._refusals = refusals
        self._gate = gate
        self._metrics = metrics
        self._kafka_conf = kafka_conf
        self._sent: dict[int, _Sent] = {}
        self._published: dict[str, Any] = {}  # topic -> its events_published child, looked up once
        self._published_pending: dict[str, int] = {}  # acks not yet added to events_published
        self._denied: KafkaAccessError | None = None  # a Write the ACLs refused: stop, do not rebuild

    def __len__(self) -> int:
        """How many records are sent and not yet answered."""
        return len(self._sent)

    def track(self, row: OutboxRow, record: KafkaRecord) -> None:
        """`record`, built from `row`, is about to be sent."""
        self.tracker.track(row.seq, record.size)
        self._sent[row.seq] = _Sent(record.topic, row.occurred_at.timestamp())

    def forget(self) -> None:
        """The producer was discarded: none of its reports will count."""
        self._sent.clear()

    def report(self, seq: int, generation: int, err: KafkaError | None) -> None:
        """A delivery report, as the publisher calls it."""
        tracker = self.tracker
        if generation != tracker.generation:
            return
        if err is not None:
            self._metrics.publish_errors.labels(kind=err.name()).inc()
            if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and self._denied is None:
                sent = self._sent.get(seq)
                topic = sent.topic if sent is not None else BRIDGE_TOPICS
                self._denied = denied(self._kafka_conf, "Write", f"topic {topic}", err.name())
            if err.code() in RECORD_REFUSED:
                self._refusals.refused(seq, f"{err.name()}: {err.str()}")
                sent = self._sent.get(seq)
                if sent is not None:
                    self._gate.recheck(sent.topic)
            return
        sent = self._sent.pop(seq, None)
        self._refusals.delivered(seq)
        if tracker.ack(seq, generation) and sent is not None:
            # Counted here, added to the counter once per loop turn (`flush_published`): a locked
            # increment per event cost more than the rest of the ack.
            pending = self._published_pending
            pending[sent.topic] = pending.get(sent.topic, 0) + 1
            self._metrics.commit_to_ack_seconds.observe(max(0.0, time.time() - sent.occurred_at))

    def flush_published(self) -> None:
        if not self._published_pending:
            return
        for topic, count in self._published_pending.items():
            published = self._published.get(topic)
            if published is None:
                published = self._published[topic] = self._metrics.events_published.labels(topic=topic)
            published.inc(count)
        self._published_pending.clear()

    def refusal(self, failure: DeliveryFailure) -> KafkaAccessError | None:
        """The access error a failed delivery means (no ACL, credentials or certificate refused), if any:
        re-sending would fail the same way, so the term stops instead of rebuilding."""
        if self._denied is not None:
            return self._denied
        sent = self._sent.get(failure.seq) if failure.seq is not None else None
        return delivery_refused(failure.code, failure.reason, self._kafka_conf, sent.topic if sent else None)
