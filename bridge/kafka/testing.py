"""In-memory stand-ins for the Kafka side, for fast tests of the daemon without a broker.

`InMemoryPublisher` implements the `Publisher` interface: records are "delivered" on the next `poll`,
in the order they were sent, and reported through the same delivery callback the real producer uses.
`AcceptingTopicGuard` accepts every topic with the broker's default size limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from bridge.core.records import KafkaRecord
from bridge.kafka.publisher import DeliveryFailure
from bridge.kafka.topics import TopicReport

#: The broker's default max.message.bytes plus the record batch overhead, as a real topic reports it.
DEFAULT_TOPIC_MAX_MESSAGE_BYTES = 1_048_588


class InMemoryPublisher:
    """A producer whose broker accepts everything; `delivered` holds the records in delivery order."""

    def __init__(self, on_delivery: Callable[[int, int, KafkaError | None], None],
                 delivered: list[KafkaRecord] | None = None, *, hold: bool = False) -> None:
        self.failure: DeliveryFailure | None = None
        self.delivered: list[KafkaRecord] = [] if delivered is None else delivered
        #: While set, nothing is delivered: records stay queued (a broker that does not answer).
        self.hold = hold
        self._on_delivery = on_delivery
        self._queued: list[tuple[KafkaRecord, int]] = []
        self.closed = False

    @property
    def queued(self) -> int:
        """Records sent and not yet delivered."""
        return len(self._queued)

    def send(self, record: KafkaRecord, generation: int) -> None:
        self._queued.append((record, generation))

    def poll(self, timeout: float) -> int:
        if self.hold:
            if timeout:
                time.sleep(min(timeout, 0.01))
            return 0
        queued, self._queued = self._queued, []
        if not queued and timeout:
            time.sleep(min(timeout, 0.01))
        for record, generation in queued:
            self.delivered.append(record)
            self._on_delivery(record.seq, generation, None)
        return len(queued)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0

    def close(self, timeout: float = 0.0) -> None:
        self._queued.clear()
        self.closed = True


class AcceptingTopicGuard:
    """A topic guard for which every topic exists and is safe."""

    def ensure(self, topic: str, allow_create: bool) -> TopicReport:
        return TopicReport(topic, exists=True, max_message_bytes=DEFAULT_TOPIC_MAX_MESSAGE_BYTES)


def publisher_factory(delivered: list[KafkaRecord], made: list[InMemoryPublisher] | None = None,
                      *, hold: bool = False) -> Callable[[dict[str, Any], Any], InMemoryPublisher]:
    """A `build_daemon(publisher_factory=...)` whose every producer appends to one `delivered` list (and
    to `made`, when given, so a test can reach the current one)."""

    def make(_settings: dict[str, Any], on_delivery: Any) -> InMemoryPublisher:
        publisher = InMemoryPublisher(on_delivery, delivered, hold=hold)
        if made is not None:
            made.append(publisher)
        return publisher

    return make
