"""A poll shorter than a millisecond still waits. librdkafka counts its waits in whole milliseconds and
confluent-kafka truncates the timeout, so `poll(0.0004)` returned at once: the daemon, waiting out the last
fraction of its read interval in such calls, spun a core between reads of a trickle of commits. Now it serves
what is there and sleeps the rest. librdkafka's in-process mock cluster stands in for Kafka."""

from __future__ import annotations

import time

from bridge.config import BridgeConfig
from bridge.kafka.producer_settings import producer_settings
from bridge.kafka.publisher import KafkaPublisher

MOCK = {"test.mock.num.brokers": 1, "log_level": 3}
CALLS = 50


def _publisher() -> KafkaPublisher:
    return KafkaPublisher({**producer_settings(BridgeConfig().producer).conf, **MOCK}, lambda *_: None)


def _seconds_for(publisher: KafkaPublisher, timeout: float) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        publisher.poll(timeout)
    return time.perf_counter() - started


def test_a_poll_shorter_than_a_millisecond_waits_as_long_as_asked() -> None:
    publisher = _publisher()
    try:
        # A wait cannot be cut short by a slow machine: each call took at least the 0.4 ms it asked for.
        assert _seconds_for(publisher, 0.0004) >= CALLS * 0.0004
    finally:
        publisher.close(0)
