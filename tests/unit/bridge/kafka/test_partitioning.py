"""The pure-Python murmur2 matches the Java client and librdkafka's `murmur2_random` partitioner."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message, Producer
from hypothesis import given
from hypothesis import strategies as st

from bridge.kafka.partitioning import murmur2, partition_for_key, to_positive

pytestmark = pytest.mark.unit

# Apache Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_UTILS_TEST_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# librdkafka src/rdmurmur2.c, unittest_murmur2 (`java_murmur2_results`): an independent source that
# also covers every tail length (0 to 3 trailing bytes) and the empty key.
LIBRDKAFKA_VECTORS = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (b"1234", 0x9FC97B14),
    (b"234", 0xE7C009CA),
    (b"34", 0x873930DA),
    (b"4", 0x5A4B5CA1),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424F1C),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4A62B377),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xE0E4E09E),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62B8B43F),
    (b"", 0x106E08D9),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_UTILS_TEST_VECTORS)
def test_murmur2_matches_kafka_utils_test_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected_unsigned"), LIBRDKAFKA_VECTORS)
def test_murmur2_matches_librdkafka_vectors(key: bytes, expected_unsigned: int) -> None:
    assert murmur2(key) & 0xFFFFFFFF == expected_unsigned


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; toPositive maps it to 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5


def test_partition_for_key_uses_the_positive_hash_modulo_the_count() -> None:
    # -790332482 & 0x7fffffff == 1357151166, and 1357151166 % 50 == 16.
    assert partition_for_key(b"foobar", 50) == 16


def test_partition_for_key_refuses_zero_partitions() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", 0)


@given(st.binary(max_size=300))
def test_murmur2_is_a_signed_32_bit_int(key: bytes) -> None:
    assert -(2**31) <= murmur2(key) < 2**31


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_partition_is_in_range_and_deterministic(key: bytes, num_partitions: int) -> None:
    partition = partition_for_key(key, num_partitions)
    assert 0 <= partition < num_partitions
    assert partition == partition_for_key(key, num_partitions)


def test_librdkafka_murmur2_random_puts_keys_where_the_java_client_would() -> None:
    # librdkafka's in-process mock cluster: no external broker, but the real partitioner and protocol.
    producer = Producer(
        {
            "test.mock.num.brokers": 1,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            "log_level": 3,
        }
    )
    keys = [key for key, _ in KAFKA_UTILS_TEST_VECTORS + LIBRDKAFKA_VECTORS]
    keys += [f"order-{i}".encode() for i in range(200)] + ["ünïcødé-aggregate".encode()]
    delivered: dict[bytes, int] = {}
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        key, partition = msg.key(), msg.partition()
        if err is not None:
            errors.append(err)
        elif isinstance(key, bytes) and partition is not None:
            delivered[key] = partition

    for key in keys:
        producer.produce("copartition-check", key=key, value=b"{}", on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert errors == []
    topic = producer.list_topics("copartition-check", timeout=10).topics["copartition-check"]
    num_partitions = len(topic.partitions)
    assert num_partitions > 1
    assert {key: partition_for_key(key, num_partitions) for key in keys} == delivered
