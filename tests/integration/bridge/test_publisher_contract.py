"""The publisher contract (tests/contracts/publisher.py) on `KafkaPublisher` and on `TransactionalPublisher`
against a real broker, with the bridge's own producer settings (the transactional one's records read back as a
`read_committed` consumer does); the unit tests run the same suite on the in-memory publishers. And what only a
real broker shows of the transactional one: a new producer fences the old, and each commit writes its progress."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from bridge.config import BridgeConfig
from bridge.kafka.producer_settings import producer_settings
from bridge.kafka.progress import Progress, committed_progress
from bridge.kafka.publisher import DeliveryCallback, KafkaPublisher
from bridge.kafka.transactional import TransactionalPublisher, is_fenced
from tests.contracts.publisher import (
    GENERATION,
    SMALL_TOPIC_LIMIT,
    Landed,
    NewPublisher,
    PublisherContract,
    Reports,
    record,
)
from tests.support import bridge_config, read_topic, record_seq

pytestmark = pytest.mark.timeout(180)


def _led(bootstrap: str, topic: str, partitions: int) -> str:
    """`topic`, once the leader of each of its partitions answers for it: a producer's first request to a
    partition created a moment ago can fail and then be reported delivered without an offset, which the
    publisher rightly counts as a failure (`bridge.kafka.publisher.unconfirmed`); the bridge's topic guard
    waits the same way after it creates a topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    pending = {TopicPartition(topic, partition) for partition in range(partitions)}
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        for partition, future in admin.list_offsets({tp: OffsetSpec.latest() for tp in pending}).items():
            try:
                future.result(10)
            except KafkaException:
                continue  # not led yet
            pending.discard(partition)
        if pending:
            time.sleep(0.05)
    assert not pending, f"partitions of {topic} have no leader after 30 s: {sorted(p.partition for p in pending)}"
    return topic


class TestKafkaPublisher(PublisherContract):
    @pytest.fixture()
    def new_publisher(self, kafka_bootstrap: str, sqlite_url: str) -> Iterator[NewPublisher]:
        settings = producer_settings(bridge_config(sqlite_url, kafka_bootstrap).producer).conf
        made: list[KafkaPublisher] = []

        def make(on_delivery: DeliveryCallback) -> KafkaPublisher:
            made.append(KafkaPublisher(settings, on_delivery))
            return made[-1]

        yield make
        for publisher in made:
            publisher.close(0)

    @pytest.fixture()
    def topic(self, kafka_bootstrap: str, topic_factory: Callable[..., str]) -> str:
        return _led(kafka_bootstrap, topic_factory("contract", partitions=3), 3)

    @pytest.fixture()
    def refusing_topic(self, kafka_bootstrap: str, topic_factory: Callable[..., str]) -> str:
        topic = topic_factory("contract-small", partitions=1, config={"max.message.bytes": str(SMALL_TOPIC_LIMIT)})
        return _led(kafka_bootstrap, topic, 1)

    @pytest.fixture()
    def landed(self, kafka_bootstrap: str) -> Landed:
        def read(topic: str) -> list[tuple[bytes, int]]:
            records = sorted(read_topic(kafka_bootstrap, topic), key=lambda m: (m.partition(), m.offset()))
            return [(m.key(), record_seq(m)) for m in records]

        return read


class TestTransactionalPublisher(TestKafkaPublisher):
    """The same contract, each record reported once its transaction committed."""

    @pytest.fixture()
    def config(self, kafka_bootstrap: str, sqlite_url: str, topic_factory: Callable[..., str]) -> BridgeConfig:
        config = bridge_config(sqlite_url, kafka_bootstrap, delivery="exactly-once", transaction_interval_ms=50)
        topic_factory(name=config.progress_topic_name, partitions=1, config={"cleanup.policy": "compact"})
        return config

    @pytest.fixture()
    def new_publisher(self, config: BridgeConfig) -> Iterator[NewPublisher]:
        settings = producer_settings(config.producer).conf
        policy = config.transactions
        assert policy is not None
        made: list[TransactionalPublisher] = []

        def make(on_delivery: DeliveryCallback) -> TransactionalPublisher:
            made.append(TransactionalPublisher(settings, on_delivery, policy))
            assert made[-1].failure is None, made[-1].failure
            return made[-1]

        yield make
        for publisher in made:
            publisher.close(0)

    def test_each_commit_records_the_last_seq_it_covers_and_its_event_for_a_read_committed_reader(
        self, new_publisher: NewPublisher, topic: str, config: BridgeConfig
    ) -> None:
        policy = config.transactions
        assert policy is not None
        client = config.kafka.client_conf()
        assert committed_progress(client, policy.progress_topic, policy.progress_key) is None, "nothing committed yet"
        publisher = new_publisher(Reports())
        for seq in range(1, 21):
            publisher.send(record(seq, topic), GENERATION)
        assert publisher.flush(30) == 0
        assert committed_progress(client, policy.progress_topic, policy.progress_key) == Progress(20, "e-20")
        for seq in range(21, 26):
            publisher.send(record(seq, topic), GENERATION)
        served_until = time.monotonic() + 1.0  # the daemon polls every turn: well past the 50 ms interval
        while time.monotonic() < served_until:
            publisher.poll(0.1)
        assert committed_progress(client, policy.progress_topic, policy.progress_key) == Progress(25, "e-25"), \
            "committed by age"

    def test_a_new_producer_fences_the_old_one_whose_open_transaction_never_becomes_visible(
        self, config: BridgeConfig, topic: str, landed: Landed
    ) -> None:
        settings = producer_settings(config.producer).conf
        assert config.transactions is not None
        policy = replace(config.transactions, interval_s=3600.0)  # commits on flush only
        old_reports, new_reports = Reports(), Reports()
        old = TransactionalPublisher(settings, old_reports, policy)
        try:
            old.send(record(1, topic), GENERATION)
            assert old.flush(30) == 0 and old_reports.seen == [(1, GENERATION, None)]
            for seq in range(2, 6):
                old.send(record(seq, topic), GENERATION)
            deadline = time.monotonic() + 10
            while len(old) and time.monotonic() < deadline:
                old.poll(0.1)  # appended, held, not committed: then its process froze
            assert old_reports.seen == [(1, GENERATION, None)]
            new = TransactionalPublisher(settings, new_reports, policy)  # a new leader's: fences the old producer
            try:
                assert new.failure is None, new.failure
                new.send(record(2, topic), GENERATION)
                assert new.flush(30) == 0 and new_reports.seen == [(2, GENERATION, None)]
            finally:
                new.close()
            old.flush(10)  # woken: its commit is refused
            assert is_fenced(old.failure), old.failure
            assert sorted(seq for seq, _, err in old_reports.seen if err is not None) == [2, 3, 4, 5]
        finally:
            old.close(0)
        assert sorted(seq for _, seq in landed(topic)) == [1, 2], "a read_committed consumer sees each once"


def test_send_queued_sends_at_once_what_linger_would_hold_back(
    kafka_bootstrap: str, sqlite_url: str, topic_factory: Callable[..., str]
) -> None:
    """The daemon's wait after a read that caught up: `send_queued` has librdkafka send what it holds without
    waiting out linger.ms (there at its longest, 3 s), where `poll` leaves it lingering."""
    linger_s = 3.0
    settings = {**producer_settings(bridge_config(sqlite_url, kafka_bootstrap).producer).conf,
                "linger.ms": int(linger_s * 1000)}
    topic = _led(kafka_bootstrap, topic_factory("send-queued", partitions=1), 1)
    reports = Reports()
    publisher = KafkaPublisher(settings, reports)
    try:
        publisher.send(record(1, topic), GENERATION)  # the connection and the producer id: a first send's cost
        assert publisher.flush(30) == 0
        publisher.send(record(2, topic), GENERATION)
        waited_until = time.monotonic() + 0.5
        while time.monotonic() < waited_until:
            publisher.poll(0.05)
        assert reports.seqs() == [1], "poll served a report linger.ms was still holding back"
        started = time.monotonic()
        while len(reports.seen) < 2 and time.monotonic() - started < linger_s:
            publisher.send_queued(0.01)
        took = time.monotonic() - started
        assert reports.seen == [(1, GENERATION, None), (2, GENERATION, None)]
        assert took < linger_s / 3, f"send_queued took {took:.2f} s: the record waited for linger.ms"
        assert publisher.failure is None
    finally:
        publisher.close(0)
