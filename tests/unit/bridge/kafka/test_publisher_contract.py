"""The publisher contract (tests/contracts/publisher.py) on `InMemoryPublisher` and its exactly-once sibling,
the in-package brokers the daemon's unit tests use; tests/integration/bridge/test_publisher_contract.py runs
it on real Kafka."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.core.records import KafkaRecord
from bridge.kafka.publisher import DeliveryCallback
from bridge.kafka.testing import (
    InMemoryCoordinator,
    InMemoryPublisher,
    InMemoryTransactionalPublisher,
    over_limit,
)
from tests.contracts.publisher import SMALL_TOPIC_LIMIT, Landed, NewPublisher, PublisherContract

REFUSING_TOPIC = "u.small"


class TestInMemoryPublisher(PublisherContract):
    @pytest.fixture()
    def delivered(self) -> list[KafkaRecord]:
        return []

    @pytest.fixture()
    def new_publisher(self, delivered: list[KafkaRecord]) -> Iterator[NewPublisher]:
        made: list[InMemoryPublisher] = []

        def make(on_delivery: DeliveryCallback) -> InMemoryPublisher:
            made.append(InMemoryPublisher(on_delivery, delivered,
                                          refuse=over_limit({REFUSING_TOPIC: SMALL_TOPIC_LIMIT})))
            return made[-1]

        yield make
        for publisher in made:
            publisher.close(0)

    @pytest.fixture()
    def topic(self) -> str:
        return "u.order"

    @pytest.fixture()
    def refusing_topic(self) -> str:
        return REFUSING_TOPIC

    @pytest.fixture()
    def landed(self, delivered: list[KafkaRecord]) -> Landed:
        return lambda topic: [(record.key, record.seq) for record in delivered if record.topic == topic]


class TestInMemoryTransactionalPublisher(PublisherContract):
    """The same contract on the exactly-once fake: reports come once its transaction committed."""

    @pytest.fixture()
    def coordinator(self) -> InMemoryCoordinator:
        return InMemoryCoordinator()

    @pytest.fixture()
    def new_publisher(self, coordinator: InMemoryCoordinator) -> Iterator[NewPublisher]:
        made: list[InMemoryTransactionalPublisher] = []

        def make(on_delivery: DeliveryCallback) -> InMemoryTransactionalPublisher:
            made.append(InMemoryTransactionalPublisher(on_delivery, coordinator, max_events=7, interval_s=0.05,
                                                       refuse=over_limit({REFUSING_TOPIC: SMALL_TOPIC_LIMIT})))
            return made[-1]

        yield make
        for publisher in made:
            publisher.close(0)

    @pytest.fixture()
    def topic(self) -> str:
        return "u.order"

    @pytest.fixture()
    def refusing_topic(self) -> str:
        return REFUSING_TOPIC

    @pytest.fixture()
    def landed(self, coordinator: InMemoryCoordinator) -> Landed:
        return lambda topic: [(record.key, record.seq) for record in coordinator.delivered if record.topic == topic]
