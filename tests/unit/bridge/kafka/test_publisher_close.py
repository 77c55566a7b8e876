"""A discarded producer is finished for good before anything is sent again: `close` drops what is
queued, waits (bounded) for the broker to answer what is in flight, reports each delivery, and destroys
the producer, which nothing keeps alive afterwards; a daemon rebuild does exactly that. librdkafka's
in-process mock cluster stands in for Kafka, its round trip slowed so that sends stay in flight."""

from __future__ import annotations

import gc
import os
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from bridge.config import BridgeConfig, load_config
from bridge.core.records import KafkaRecord
from bridge.daemon import build_daemon
from bridge.kafka.producer_settings import producer_settings
from bridge.kafka.publisher import DeliveryFailure, KafkaPublisher
from bridge.kafka.testing import AcceptingTopicGuard
from bridge.store.engine import make_engine
from bridge.store.testing import InMemoryOutbox

RTT_MS = 200  # the mock broker answers each request this late
# Connecting to the broker as soon as metadata names it, rather than on librdkafka's next one-second tick,
# makes the warm-up half a second shorter.
MOCK = {"test.mock.num.brokers": 1, "test.mock.broker.rtt": RTT_MS, "log_level": 3, "enable.sparse.connections": False}
TOPIC = "u.order"
IN_FLIGHT = 6


class Reports:
    """The (seq, generation, error) of every delivery report, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, KafkaError | None]] = []

    def __call__(self, seq: int, generation: int, err: KafkaError | None) -> None:
        self.seen.append((seq, generation, err))


def _record(seq: int) -> KafkaRecord:
    return KafkaRecord.of(seq, TOPIC, f"order-{seq % 3}".encode(), b"{}", [("seq", str(seq).encode())])


def _mock_publisher(settings: dict[str, Any], on_delivery: Any) -> KafkaPublisher:
    return KafkaPublisher({**settings, **MOCK}, on_delivery)


def _warmed_up(settings: dict[str, Any], reports: Reports) -> KafkaPublisher:
    """A publisher whose connection, metadata and producer id are in place, so later sends go out at once."""
    publisher = _mock_publisher(settings, reports)
    publisher.send(_record(0), 0)
    assert publisher.flush(30) == 0
    assert reports.seen == [(0, 0, None)]
    reports.seen.clear()
    return publisher


def _live_producers() -> int:
    """confluent-kafka Producers still in memory (they take no weak references)."""
    gc.collect()
    return sum(isinstance(o, Producer) for o in gc.get_objects())


def _threads() -> int:
    """This process's threads, librdkafka's own included."""
    return len(os.listdir("/proc/self/task"))


def _config(tmp_path: Path) -> BridgeConfig:
    return load_config(flags={"db_url": f"sqlite:///{tmp_path / 'outbox.db'}", "bridge_name": "unit",
                              "allow_single_broker": True, "replication_factor": 1, "metrics_port": 0,
                              "lease_timeout_s": 10.0}, env={})


def test_close_waits_for_the_broker_to_answer_what_is_in_flight_and_reports_it() -> None:
    reports = Reports()
    publisher = _warmed_up(producer_settings(BridgeConfig().producer).conf, reports)
    for seq in range(1, IN_FLIGHT + 1):
        publisher.send(_record(seq), 0)
    publisher.poll(0.05)  # sent, and the answers are still a round trip away
    assert reports.seen == []
    started = time.monotonic()
    publisher.close(5.0)
    assert time.monotonic() - started < 5.0
    assert sorted(reports.seen) == [(seq, 0, None) for seq in range(1, IN_FLIGHT + 1)], "delivered, not purged"


def test_close_gives_up_after_its_timeout_and_still_reports_every_message(caplog: pytest.LogCaptureFixture) -> None:
    reports = Reports()
    publisher = _warmed_up(producer_settings(BridgeConfig().producer).conf, reports)
    for seq in range(1, IN_FLIGHT + 1):
        publisher.send(_record(seq), 0)
    publisher.poll(0.05)
    started = time.monotonic()
    publisher.close(0.01)
    assert time.monotonic() - started < RTT_MS / 1000
    assert sorted(seq for seq, _, _ in reports.seen) == list(range(1, IN_FLIGHT + 1)), "each reported once"
    assert all(err is not None and err.code() == KafkaError._PURGE_INFLIGHT for _, _, err in reports.seen)
    assert "producer closed with records unanswered" in caplog.text
    # With enable.gapless.guarantee a purged request is a gap: a fatal error, recorded rather than raised.
    assert publisher.failure is not None and publisher.failure.fatal


def test_a_closed_publisher_its_producer_and_their_threads_are_gone() -> None:
    producers, threads = _live_producers(), _threads()
    reports = Reports()
    publisher = _warmed_up(producer_settings(BridgeConfig().producer).conf, reports)
    for seq in range(1, IN_FLIGHT + 1):
        publisher.send(_record(seq), 0)
    publisher.poll(0.05)
    assert _live_producers() == producers + 1 and _threads() > threads
    publisher_ref = weakref.ref(publisher)
    publisher.close(5.0)
    del publisher
    assert publisher_ref() is None, "nothing holds the publisher once it is closed, not even a cycle"
    assert _live_producers() == producers
    assert _threads() == threads, "librdkafka's threads (and the mock cluster's) have ended"


def test_a_rebuild_finishes_the_old_producer_before_it_builds_the_new_one(tmp_path: Path) -> None:
    """What the old producer had in flight is answered and counted (the watermark moves past it) before
    the rewind, and the old producer is gone afterwards: it cannot send anything after the re-sends."""
    config = _config(tmp_path)
    built: list[weakref.ref[KafkaPublisher]] = []

    def new_publisher(settings: dict[str, Any], on_delivery: Any) -> KafkaPublisher:
        publisher = _mock_publisher(settings, on_delivery)
        built.append(weakref.ref(publisher))
        return publisher

    engine = make_engine(config.db_url.get_secret_value())
    daemon = build_daemon(config, publisher_factory=new_publisher, topic_guard=AcceptingTopicGuard(),
                          instance_id="unit", engine=engine)
    term = daemon.new_term(0, InMemoryOutbox().reader())
    tracker = term.tracker
    old = term.publisher
    assert isinstance(old, KafkaPublisher)
    old.send(_record(1), tracker.generation)  # warm up: connection, metadata, producer id
    tracker.track(1, _record(1).size)
    assert old.flush(30) == 0 and tracker.watermark == 1
    for seq in range(2, IN_FLIGHT + 2):
        tracker.track(seq, _record(seq).size)
        old.send(_record(seq), tracker.generation)
    old.poll(0.05)
    assert tracker.watermark == 1, "still in flight"
    old.failure = DeliveryFailure(IN_FLIGHT + 2, KafkaError.MSG_SIZE_TOO_LARGE, "refused", fatal=False)
    producers = _live_producers()

    term._rebuild()
    new = term.publisher
    try:
        assert tracker.watermark == IN_FLIGHT + 1, "the in-flight acks arrived before the rewind"
        assert len(built) == 2 and built[1]() is new
        del old
        gc.collect()
        assert built[0]() is None, "the old publisher is gone"
        assert _live_producers() == producers, "the new producer replaced the old one, which is gone"
    finally:
        new.close(0)
        engine.dispose()
