"""`build_daemon` chooses the publisher by `BRIDGE_DELIVERY`: the idempotent one by default, the transactional one
(with the resume step that asks Kafka what it committed) for exactly-once. librdkafka's mock cluster stands in for
Kafka, so the transactional producer can fence and begin for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.config import load_config
from bridge.daemon import build_daemon
from bridge.kafka.publisher import KafkaPublisher
from bridge.kafka.testing import AcceptingTopicGuard
from bridge.kafka.transactional import TransactionalPublisher
from bridge.store.engine import make_engine

pytestmark = pytest.mark.unit

MOCK = {"test.mock.num.brokers": 1, "log_level": 3}


def _daemon(tmp_path: Path, **flags: Any) -> Any:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    config = load_config(flags={"db_url": url, "allow_single_broker": True, "replication_factor": 1,
                                "metrics_port": 0, **flags}, env={"BRIDGE_PRODUCER_EXTRA": str(MOCK).replace("'", '"')})
    return build_daemon(config, topic_guard=AcceptingTopicGuard(), engine=make_engine(url))


def _made(daemon: Any) -> Any:
    publisher = daemon._parts.new_publisher(lambda *_: None)
    publisher.close(0)
    return publisher


def test_at_least_once_builds_the_idempotent_publisher_and_no_resume_step(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path)
    publisher = _made(daemon)
    assert type(publisher) is KafkaPublisher
    assert daemon._parts.committed is None


def test_exactly_once_builds_the_transactional_publisher_and_the_resume_step(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path, delivery="exactly-once", bridge_name="orders")
    publisher = _made(daemon)
    assert isinstance(publisher, TransactionalPublisher)
    assert publisher.failure is None or "closed" in publisher.failure.reason, "init_transactions passed"
    assert daemon._parts.committed is not None


def test_a_committed_callable_given_in_exactly_once_is_the_one_the_terms_ask(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    config = load_config(flags={"db_url": url, "allow_single_broker": True, "replication_factor": 1,
                                "metrics_port": 0, "delivery": "exactly-once"}, env={})
    asked = lambda _watermark: 41  # noqa: E731
    daemon = build_daemon(config, topic_guard=AcceptingTopicGuard(), engine=make_engine(url), committed=asked,
                          publisher_factory=lambda _settings, _on_delivery: None)  # type: ignore[arg-type,return-value]
    assert daemon._parts.committed is asked


def test_exactly_once_transactions_are_counted_on_the_daemons_metrics_by_outcome(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path, delivery="exactly-once", bridge_name="orders")
    registry = daemon.metrics.registry

    def ended(outcome: str) -> float | None:
        return registry.get_sample_value("outbox_transactions_total", {"outcome": outcome})

    assert (ended("committed"), ended("aborted")) == (0.0, 0.0), "both series from the start"
    publisher = daemon._parts.new_publisher(lambda *_: None)
    assert publisher.mark_progress(3)
    publisher.close(0)
    assert (ended("committed"), ended("aborted")) == (1.0, 0.0)


def test_exactly_once_with_tracing_builds_the_traced_transactional_publisher(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from bridge.kafka.traced_publisher import TracedTransactionalPublisher

    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    config = load_config(flags={"db_url": url, "allow_single_broker": True, "replication_factor": 1,
                                "metrics_port": 0, "delivery": "exactly-once"},
                         env={"BRIDGE_PRODUCER_EXTRA": str(MOCK).replace("'", '"')})
    daemon = build_daemon(config, topic_guard=AcceptingTopicGuard(), engine=make_engine(url),
                          tracer_provider=TracerProvider())
    assert isinstance(_made(daemon), TracedTransactionalPublisher)
