"""The publisher contract (tests/contracts/publisher.py) on `InMemoryPublisher`, the in-package broker the
daemon's unit tests use; tests/integration/bridge/test_publisher_contract.py runs it on real Kafka."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.core.records import KafkaRecord
from bridge.kafka.publisher import DeliveryCallback
from bridge.kafka.testing import InMemoryPublisher, over_limit
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
