"""`read_topic`, the one way the integration tests read a whole topic back, against librdkafka's in-process
mock cluster: every record there when the call starts, partition after partition in offset order, and the end
of a partition found even when its last offset is a transaction marker, which no consumer is given."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Message, Producer

from tests.support import read_topic

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    """The address of a one-broker mock cluster, which lives as long as the producer that started it."""
    producer = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    broker = next(iter(producer.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    producer.flush(10)


def _produce(producer: Producer, topic: str, count: int) -> list[tuple[int, int, bytes]]:
    """Send `count` records over a few keys; their (partition, offset, value) as the delivery reports give them."""
    delivered: list[tuple[int, int, bytes]] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        delivered.append((msg.partition() or 0, msg.offset() or 0, msg.value() or b""))

    for n in range(count):
        producer.produce(topic, key=f"key-{n % 5}".encode(), value=str(n).encode(), on_delivery=report)
    assert producer.flush(10) == 0
    return delivered


def test_every_record_is_read_partition_after_partition_each_in_offset_order(bootstrap: str) -> None:
    delivered = _produce(Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}), "whole.plain", 40)
    assert len({partition for partition, _, _ in delivered}) > 1, "the records span several partitions"
    read = [(m.partition(), m.offset(), m.value()) for m in read_topic(bootstrap, "whole.plain", timeout=10)]
    assert read == sorted(delivered)


def test_a_partition_ending_in_a_transaction_marker_is_read_to_its_end(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "transactional.id": "whole-tx"})
    producer.init_transactions(10)
    producer.begin_transaction()
    delivered = _produce(producer, "whole.tx", 12)
    producer.commit_transaction(10)
    read = [(m.partition(), m.offset(), m.value()) for m in read_topic(bootstrap, "whole.tx", timeout=10)]
    assert read == sorted(delivered)


def test_a_topic_that_does_not_exist_has_no_records(bootstrap: str) -> None:
    assert read_topic(bootstrap, "whole.never-written", timeout=10) == []
