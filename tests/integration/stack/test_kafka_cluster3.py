"""The 3-broker KRaft cluster is real: RF=3 with min.insync.replicas=2 survives one broker, refuses writes
without two, and keeps every acknowledged message when the brokers return."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import read_topic, topic_configs


def _produce(bootstrap: str, topic: str, values: list[str], idempotent: bool = True) -> dict[str, object]:
    """Send values with acks=all; return {value: error or None} from the delivery reports."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}
    if idempotent:
        conf |= {"enable.idempotence": True, "delivery.timeout.ms": 60000}
    else:
        # Fail fast: one attempt, so the broker's refusal reaches the delivery report as it is.
        conf |= {"retries": 0, "request.timeout.ms": 5000, "delivery.timeout.ms": 6000}
    producer = Producer(conf)
    outcome: dict[str, object] = {}
    for value in values:
        producer.produce(topic, key=value, value=value,
                         on_delivery=lambda err, msg: outcome.__setitem__(msg.value().decode(), err))
    producer.flush(90)
    return outcome


def test_rf3_min_isr2_survives_one_broker_refuses_without_two(kafka_cluster3) -> None:
    bootstrap = kafka_cluster3.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"durability.{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3,
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    config = topic_configs(bootstrap, topic)
    assert config["min.insync.replicas"] == "2"
    assert config["unclean.leader.election.enable"] == "false"
    assert all(len(p.replicas) == 3 for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values())

    acknowledged: list[str] = []
    try:
        before = [f"before-{i}" for i in range(200)]
        assert all(err is None for err in _produce(bootstrap, topic, before).values())
        acknowledged += before

        kafka_cluster3.stop_broker(3, kill=True)
        one_down = [f"one-down-{i}" for i in range(200)]
        outcome = _produce(bootstrap, topic, one_down)
        assert all(err is None for err in outcome.values()), {k: v for k, v in outcome.items() if v}
        acknowledged += one_down

        kafka_cluster3.stop_broker(2, kill=True)
        refused: set[int] = set()
        accepted_while_two_down = []
        deadline = time.monotonic() + 90
        attempt = 0
        while time.monotonic() < deadline and KafkaError.NOT_ENOUGH_REPLICAS not in refused:
            batch = [f"two-down-{attempt}-{i}" for i in range(6)]
            attempt += 1
            for value, err in _produce(bootstrap, topic, batch, idempotent=False).items():
                if err is None:
                    accepted_while_two_down.append(value)
                else:
                    refused.add(err.code())
        assert KafkaError.NOT_ENOUGH_REPLICAS in refused, f"saw only {refused}"
        assert accepted_while_two_down == [], "acks=all writes were accepted with one replica in sync"
    finally:
        kafka_cluster3.start_broker(2)
        kafka_cluster3.start_broker(3)

    after = [f"after-{i}" for i in range(200)]
    deadline = time.monotonic() + 90
    outcome = _produce(bootstrap, topic, after)
    while any(outcome.values()) and time.monotonic() < deadline:
        time.sleep(2)
        outcome = _produce(bootstrap, topic, after)
    assert all(err is None for err in outcome.values())
    acknowledged += after

    seen = [m.value().decode() for m in read_topic(bootstrap, topic)]
    missing = set(acknowledged) - set(seen)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    admin.delete_topics([topic])[topic].result(30)
