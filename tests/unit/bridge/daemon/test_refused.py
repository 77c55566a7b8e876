"""A record Kafka refuses for good (MSG_SIZE_TOO_LARGE after the topic check passed) goes to the
poison policy instead of being rebuilt and re-sent forever, and only that record: the broker refuses
a whole batch, so every record it named is sent again alone, and only one refused alone is poison.
`halt` stops just before it and names it; `dead-letter` routes it and goes on. The daemon runs on a
SQLite outbox with the in-memory publisher (a broker that refuses whole batches) and topic guard."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError
from sqlalchemy import create_engine, text

from bridge.config import BridgeConfig, load_config
from bridge.core.records import KafkaRecord
from bridge.daemon import EXIT_OK, EXIT_POISON, BridgeDaemon, build_daemon
from bridge.kafka.testing import AcceptingTopicGuard, InMemoryPublisher, Verdict
from bridge.migrate import upgrade
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore

REFUSED_SEQ = 7
EVENTS = 12


TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")


def _refuse_on_its_topic(dlq_topic: str) -> Verdict:
    """The broker refuses REFUSED_SEQ on its own topic (and so, `InMemoryPublisher` being a broker that
    refuses whole batches, every record sent with it between two polls), and takes it on the DLQ topic."""
    return lambda record: TOO_LARGE if record.seq == REFUSED_SEQ and record.topic != dlq_topic else None


def _config(url: str, policy: str) -> BridgeConfig:
    return load_config(flags={"db_url": url, "bridge_name": "unit", "topic_template": "u.{aggregate_type}",
                              "allow_single_broker": True, "replication_factor": 1, "metrics_port": 0,
                              "persist_interval_s": 0.05, "poison_policy": policy}, env={})


def _run(tmp_path: Path, policy: str) -> tuple[BridgeDaemon, list[list[KafkaRecord]], int, int]:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    _insert(url, EVENTS)
    config = _config(url, policy)
    by_producer: list[list[KafkaRecord]] = []

    def new_publisher(_settings: dict[str, Any], on_delivery: Any) -> InMemoryPublisher:
        publisher = InMemoryPublisher(on_delivery, refuse=_refuse_on_its_topic(config.dlq_topic_name))
        by_producer.append(publisher.delivered)
        return publisher

    daemon = build_daemon(
        config,
        publisher_factory=new_publisher,
        topic_guard=AcceptingTopicGuard(),
        instance_id="unit",
    )
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while thread.is_alive() and time.monotonic() < deadline:
        tracker = daemon.tracker
        if policy == "dead-letter" and tracker is not None and tracker.watermark == EVENTS:
            daemon.stop()
        time.sleep(0.02)
    thread.join(10)
    assert not thread.is_alive() and result, "the daemon did not stop"
    engine = make_engine(url)
    stored = OffsetStore(engine, config.bridge_name).read()
    engine.dispose()
    assert stored is not None
    return daemon, by_producer, result[0], stored.watermark


def _insert(url: str, count: int) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                 "VALUES (:e, 'order', :a, 'Placed', '{}')"),
            [{"e": f"e-{i}", "a": f"a-{i % 3}"} for i in range(1, count + 1)],
        )
    engine.dispose()


def test_halt_stops_just_before_the_record_refused_alone_and_names_it(tmp_path: Path) -> None:
    daemon, by_producer, code, watermark = _run(tmp_path, "halt")
    assert code == EXIT_POISON
    assert watermark == REFUSED_SEQ - 1, "the records refused with it in one batch were published"
    assert daemon.halted is not None and daemon.halted.seq == REFUSED_SEQ
    assert f"seq={REFUSED_SEQ}" in (daemon.last_error or "") and "MSG_SIZE_TOO_LARGE" in (daemon.last_error or "")
    # The batch refused; each named record again alone, REFUSED_SEQ refused alone; then the policy.
    assert len(by_producer) == 3
    assert [r.seq for r in by_producer[1]] == list(range(1, REFUSED_SEQ))
    assert by_producer[2] == []


def test_dead_letter_routes_only_the_record_refused_alone_and_goes_on(tmp_path: Path) -> None:
    _, by_producer, code, watermark = _run(tmp_path, "dead-letter")
    assert code == EXIT_OK and watermark == EVENTS
    accepted = [record for producer in by_producer for record in producer]
    dead = [record for record in accepted if record.topic == "outbox.dlq.unit"]
    assert [record.seq for record in dead] == [REFUSED_SEQ]
    assert b"MSG_SIZE_TOO_LARGE" in dict(dead[0].headers)["dlq_reason"]
    published = sorted(record.seq for record in accepted if record.topic == "u.order")
    assert published == [seq for seq in range(1, EVENTS + 1) if seq != REFUSED_SEQ], "each exactly once"
