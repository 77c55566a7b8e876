"""A bridge name reused on another outbox in exactly-once delivery (a new database for an old name, as a test
environment rebuilt, or a restored one): the progress Kafka keeps for the name came from the other history, and
the bridge must not resume after it. It resumes from this database's watermark and publishes every event."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from bridge.migrate import upgrade
from tests.support import (
    bridge_env,
    insert_events,
    persisted_watermark,
    read_topic,
    record_seq,
    spawn_bridge,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NOT_OURS = "Kafka's progress for this bridge name is not this outbox's"


def _visible(bootstrap: str, topic: str) -> int:
    try:
        return len(read_topic(bootstrap, topic))
    except KafkaException:  # the topic is being created
        return 0


def _publish(url: str, bootstrap: str, name: str, template: str, events: int, log: Path) -> list[dict[str, object]]:
    upgrade(url)
    insert_events(url, events)
    topic = template.replace("{aggregate_type}", "order")
    bridge = spawn_bridge(bridge_env(url, bootstrap, name, template, delivery="exactly-once",
                                     transaction_interval_ms=50, persist_interval_s=0.2), log)
    try:
        wait_until(lambda: not bridge.alive() or _visible(bootstrap, topic) >= events, 60,
                   f"{events} events visible in {topic}")
        wait_until(lambda: persisted_watermark(url, name) >= events, 30, "the watermark to follow")
        bridge.signal(signal.SIGTERM)
        assert bridge.wait(30) == 0
    finally:
        bridge.stop_if_running()
    return bridge.log_lines()


def test_a_name_reused_on_a_new_outbox_publishes_its_events_from_its_own_watermark(
        postgres_url: str, sqlite_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    name = f"reused-{uuid.uuid4().hex[:6]}"
    first, second = (f"ru{uuid.uuid4().hex[:8]}.{{aggregate_type}}" for _ in range(2))
    _publish(postgres_url, kafka_bootstrap, name, first, 50, tmp_path / "first.log")
    lines = _publish(sqlite_url, kafka_bootstrap, name, second, 30, tmp_path / "second.log")
    counts = Counter(record_seq(m) for m in read_topic(kafka_bootstrap, second.replace("{aggregate_type}", "order")))
    assert counts == Counter(range(1, 31)), "every event of the new outbox once, none skipped"
    assert any(str(line.get("msg", "")).startswith(NOT_OURS) for line in lines), "the bridge said why"
