"""The publisher contract (tests/contracts/publisher.py) on `KafkaPublisher` against a real broker, with the
bridge's own producer settings; the unit tests run the same suite on the in-memory publisher."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from bridge.kafka.producer_settings import producer_settings
from bridge.kafka.publisher import DeliveryCallback, KafkaPublisher
from tests.contracts.publisher import SMALL_TOPIC_LIMIT, Landed, NewPublisher, PublisherContract
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
