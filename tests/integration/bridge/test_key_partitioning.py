"""Through the bridge, each key lands on the partition the Java client's default partitioner picks:
`toPositive(murmur2(key)) % partitions`. Known keys are checked against hashes published by Apache
Kafka and librdkafka (independent of our murmur2), and many more keys against `bridge.kafka.partitioning`."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text

from bridge.kafka.partitioning import partition_for_key
from bridge.migrate import upgrade
from tests.support import bridge_config, read_topic, start_bridge, wait_until

# Java's Utils.murmur2 for these keys, from Kafka's UtilsTest and librdkafka's rdmurmur2.c unit test.
JAVA_MURMUR2 = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
    "kafka": 0xD067CF64 - (1 << 32),
    "giberish123456789": 0x8F552B0C - (1 << 32),
    "1234": 0x9FC97B14 - (1 << 32),
    "234": 0xE7C009CA - (1 << 32),
    "34": 0x873930DA - (1 << 32),
    "4": 0x5A4B5CA1,
    "PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    "AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
}
GENERATED = [f"order-{i}" for i in range(150)] + [f"клиент-{i}-é" for i in range(30)] + \
    [uuid.UUID(int=i).hex * 3 for i in range(20)]


@pytest.mark.parametrize("partitions", [7, 13])
def test_each_key_lands_on_the_java_default_partition(partitions, sqlite_url, kafka_bootstrap, topic_factory) -> None:
    upgrade(sqlite_url)
    config = bridge_config(sqlite_url, kafka_bootstrap, topic_partitions=partitions)
    if partitions == 13:
        topic_factory(name=config.topic_for("account"), partitions=partitions)  # an existing topic
    keys = list(JAVA_MURMUR2) + GENERATED
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                 "VALUES (:event_id, 'account', :key, 'Opened', '{}')"),
            [{"event_id": f"e-{i}", "key": key} for i, key in enumerate(keys * 2)],
        )
    engine.dispose()
    bridge = start_bridge(config)
    try:
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 2 * len(keys),
                   60, "every event")
    finally:
        assert bridge.stop() == 0

    records = read_topic(kafka_bootstrap, config.topic_for("account"))
    assert len(records) == 2 * len(keys)
    used = set()
    for m in records:
        key = m.key().decode()
        expected = partition_for_key(m.key(), partitions)
        assert m.partition() == expected, f"key {key!r}: partition {m.partition()}, Java picks {expected}"
        if key in JAVA_MURMUR2:
            assert m.partition() == (JAVA_MURMUR2[key] & 0x7FFFFFFF) % partitions, key
        used.add(m.partition())
    assert used == set(range(partitions)), "the keys spread over every partition"
