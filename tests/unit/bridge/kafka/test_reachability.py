"""Kafka out of reach is reported at once, then at most once per interval, with the count in between."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from bridge.kafka.reachability import ClientLog, Reachability

pytestmark = pytest.mark.unit

REFUSED = "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)"


def test_unreachable_brokers_are_reported_at_once_then_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    reporter = Reachability("127.0.0.1:1", interval_s=30, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="bridge.kafka"):
        assert reporter.unreachable(REFUSED)
        for second in range(1, 30):
            now[0] = second
            assert not reporter.unreachable(REFUSED)
        now[0] = 30
        assert reporter.unreachable(REFUSED)
    assert len(caplog.records) == 2
    message = caplog.records[0].getMessage()
    assert "127.0.0.1:1 (Connection refused)" in message and "`make up`" in message
    assert caplog.records[1].suppressed == 29  # type: ignore[attr-defined]


def test_client_errors_other_than_unreachable_are_left_to_the_caller() -> None:
    reporter = Reachability("b:9092", clock=lambda: 0.0)
    assert reporter.error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert not reporter.error(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication failed"))


def test_the_client_log_routes_connection_failures_and_forwards_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    reporter = Reachability("b:9092", clock=lambda: 0.0)
    client_log = ClientLog(reporter)
    with caplog.at_level(logging.DEBUG):
        client_log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
        client_log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
        client_log.log(logging.WARNING, "%s [%s] %s", "CONFWARN", "rdkafka#producer-1", "property is experimental")
    assert [(r.name, r.levelno) for r in caplog.records] == [
        ("bridge.kafka", logging.WARNING), ("bridge.kafka.librdkafka", logging.WARNING)]
