"""The Kafka side of the bridge: an idempotent producer that reports each delivery back by seq.

The canonical confluent-kafka loop: `produce(..., on_delivery=...)`, poll often, poll on BufferError,
flush at the end. A fatal or non-retriable delivery error is recorded, not raised from the callback:
the daemon then discards this producer, builds a new one and rewinds to the watermark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from bridge.records import KafkaRecord

log = logging.getLogger("bridge.publisher")

#: Called with (seq, generation, error or None) for every delivery report.
DeliveryCallback = Callable[[int, int, KafkaError | None], None]


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    """Why the current producer must be discarded."""

    seq: int | None
    code: int
    reason: str
    fatal: bool


class Publisher(Protocol):
    """What the daemon needs from a Kafka producer (a fake implements it for unit tests)."""

    failure: DeliveryFailure | None

    def send(self, record: KafkaRecord, generation: int) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...

    def close(self) -> None: ...


class KafkaPublisher:
    """One confluent-kafka Producer; build a new one after `failure` is set."""

    def __init__(self, settings: dict[str, Any], on_delivery: DeliveryCallback) -> None:
        self.failure: DeliveryFailure | None = None
        self._on_delivery = on_delivery
        self._producer = Producer({**settings, "error_cb": self._on_error})

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.failure = DeliveryFailure(None, err.code(), err.str(), fatal=True)
            log.error("fatal producer error", extra={"error": err.str(), "code": err.name()})
        else:
            # Broker down, all brokers down, timeouts: librdkafka keeps retrying within delivery.timeout.ms.
            log.warning("producer error, retrying", extra={"error": err.str(), "code": err.name()})

    def send(self, record: KafkaRecord, generation: int) -> None:
        # One partial per record (made in C), not a closure: this runs for every event.
        on_delivery = partial(self._delivered, record.seq, generation)
        headers: Any = record.headers  # read, never changed
        while True:
            try:
                self._producer.produce(
                    record.topic, value=record.value, key=record.key, headers=headers, on_delivery=on_delivery
                )
                return
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                self._producer.poll(0.05)
            except KafkaException as exc:
                # Refused before it was queued (too large for message.max.bytes, unknown topic, ...):
                # report it like a failed delivery, so every record gets exactly one report.
                err = exc.args[0]
                if self.failure is None:
                    self.failure = DeliveryFailure(record.seq, err.code(), err.str(), fatal=err.fatal())
                self._on_delivery(record.seq, generation, err)
                return

    def _delivered(self, seq: int, generation: int, err: KafkaError | None, msg: Message) -> None:
        # librdkafka has already retried within delivery.timeout.ms: a reported error is final, and
        # ordering past this seq can no longer be trusted, so the daemon rewinds.
        if err is not None and self.failure is None:
            self.failure = DeliveryFailure(seq, err.code(), err.str(), fatal=err.fatal())
        self._on_delivery(seq, generation, err)

    def poll(self, timeout: float) -> int:
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for outstanding deliveries; return how many are still unsent."""
        deadline = time.monotonic() + timeout
        remaining = len(self._producer)
        while remaining and time.monotonic() < deadline:
            remaining = self._producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        return int(remaining)

    def close(self) -> None:
        # Outstanding messages are abandoned on purpose: the daemon rewinds to the watermark.
        self._producer.purge(in_queue=True, in_flight=False)
        self._producer.poll(0)

    def __len__(self) -> int:
        return len(self._producer)
