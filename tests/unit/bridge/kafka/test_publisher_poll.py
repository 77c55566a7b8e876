"""A poll shorter than a millisecond still waits. librdkafka counts its waits in whole milliseconds and
confluent-kafka truncates the timeout, so `poll(0.0004)` returned at once: the daemon, waiting out the last
fraction of its read interval in such calls, spun a core between reads of a trickle of commits. A poll of 0
stays a look without waiting. librdkafka's in-process mock cluster stands in for Kafka."""

from __future__ import annotations

import time

from bridge.config import BridgeConfig
from bridge.kafka.producer_settings import producer_settings
from bridge.kafka.publisher import MIN_WAIT_S, KafkaPublisher, at_least_a_millisecond

MOCK = {"test.mock.num.brokers": 1, "log_level": 3}
CALLS = 50


def _publisher() -> KafkaPublisher:
    return KafkaPublisher({**producer_settings(BridgeConfig().producer).conf, **MOCK}, lambda *_: None)


def _seconds_for(publisher: KafkaPublisher, timeout: float) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        publisher.poll(timeout)
    return time.perf_counter() - started


def test_a_poll_shorter_than_a_millisecond_waits_a_millisecond() -> None:
    publisher = _publisher()
    try:
        # A wait cannot be cut short by a slow machine: each call took at least the millisecond it asked for.
        assert _seconds_for(publisher, 0.0004) >= CALLS * 0.0009
    finally:
        publisher.close(0)


def test_only_a_positive_wait_under_a_millisecond_is_rounded_up() -> None:
    assert at_least_a_millisecond(0.0) == 0.0  # a look, no wait: the daemon's poll(0) before each step
    assert at_least_a_millisecond(0.0001) == at_least_a_millisecond(0.0009) == MIN_WAIT_S
    assert at_least_a_millisecond(0.005) == 0.005
