"""`send_queued`, the daemon's wait after a read that caught up: what the producer holds for linger.ms goes out at
once (librdkafka ignores linger.ms while a flush runs), where `poll` leaves it lingering; and a fatal error met
while it serves reports ends the producer like any fatal error. librdkafka's in-process mock cluster stands in
for Kafka."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError

from bridge.config import BridgeConfig
from bridge.core.records import KafkaRecord
from bridge.kafka.producer_settings import producer_settings
from bridge.kafka.publisher import KafkaPublisher

MOCK = {"test.mock.num.brokers": 1, "log_level": 3}
LINGER_S = 3.0


def _record(seq: int) -> KafkaRecord:
    return KafkaRecord.of(seq, "orders", b"order-1", b"{}", [("seq", str(seq).encode())])


def test_what_lingers_is_sent_at_once() -> None:
    reports: list[tuple[int, KafkaError | None]] = []
    settings = {**producer_settings(BridgeConfig().producer).conf, **MOCK, "linger.ms": int(LINGER_S * 1000)}
    publisher = KafkaPublisher(settings, lambda seq, _generation, err: reports.append((seq, err)))
    try:
        publisher.send(_record(1), 1)  # the producer id and the topic's metadata: a first send's cost
        assert publisher.flush(30) == 0
        publisher.send(_record(2), 1)
        polled_until = time.monotonic() + 0.3
        while time.monotonic() < polled_until:
            publisher.poll(0.05)
        assert reports == [(1, None)], "poll served a report linger.ms was still holding back"
        started = time.monotonic()
        while len(reports) < 2 and time.monotonic() - started < LINGER_S:
            publisher.send_queued(0.01)
        took = time.monotonic() - started
        assert reports == [(1, None), (2, None)]
        assert took < LINGER_S / 3, f"send_queued took {took:.2f} s: the record waited for linger.ms"
    finally:
        publisher.close(0)


class _CrashingFlush:
    """A producer whose flush fails as confluent-kafka's does when a report's callback runs after a fatal error."""

    def flush(self, _timeout: float) -> int:
        raise SystemError("<built-in function delivered> returned a result with an exception set")

    def __len__(self) -> int:
        return 3

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"not expected: {name}")


def test_a_flush_that_fails_after_a_fatal_error_ends_the_producer() -> None:
    publisher = KafkaPublisher({**producer_settings(BridgeConfig().producer).conf, **MOCK}, lambda *_: None)
    real = publisher._producer
    publisher._producer = _CrashingFlush()  # type: ignore[assignment]
    try:
        assert publisher.send_queued(0.01) == 3, "the records still unanswered"
        assert publisher.failure is not None and publisher.failure.fatal, "the daemon discards this producer"
    finally:
        publisher._producer = real
        publisher.close(0)
