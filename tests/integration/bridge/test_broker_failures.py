"""Broker failures on the 3-broker cluster, topics with replication factor 3 and min.insync.replicas 2:
one broker killed mid-run loses nothing; with two killed, publishing stalls and the persisted watermark
does not move although new events wait; when they return, the bridge resumes and every event is in Kafka. In
exactly-once delivery, the transaction coordinator's broker killed mid-run: every event once, read_committed."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka.admin import AdminClient

from bridge.config import DeliveryMode
from bridge.kafka.transaction_policy import transactional_id
from bridge.migrate import upgrade
from tests.support import (
    bridge_config,
    head_seq,
    insert_events,
    keys_in_seq_order,
    persisted_watermark,
    read_topic,
    seq_counts,
    start_bridge,
    topic_configs,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def _writing(url: str, after: int, batches: int) -> tuple[threading.Thread, list[int]]:
    """A thread inserting `batches` batches of 50 events after seq `after`, 0.1 s apart; and the count so far."""
    written = [after]

    def write() -> None:
        for _ in range(batches):
            insert_events(url, 50, start=written[0])
            written[0] += 50
            time.sleep(0.1)

    writer = threading.Thread(target=write)
    writer.start()
    return writer, written


def _topic_settings(bootstrap: str, topic: str) -> tuple[set[int], str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions.values()
    config = topic_configs(bootstrap, topic)
    replicas = {len(p.replicas) for p in partitions}
    return replicas, config["min.insync.replicas"], config["unclean.leader.election.enable"]


def test_one_broker_down_loses_nothing_two_down_stall_without_moving_the_watermark(
    kafka_cluster3, postgres_url
) -> None:
    url = postgres_url
    upgrade(url)
    kafka_cluster3.start_all()
    config = bridge_config(url, kafka_cluster3.bootstrap, replication_factor=3, allow_single_broker=False,
                           persist_interval_s=0.2, lease_timeout_s=10)
    topic = config.topic_for("order")
    bridge = start_bridge(config)
    down: list[int] = []
    try:
        insert_events(url, 200)
        wait_until(lambda: persisted_watermark(url, config.bridge_name) == 200, 60, "the first 200 events")
        assert _topic_settings(kafka_cluster3.bootstrap, topic) == ({3}, "2", "false")

        # One broker killed while events are being written and published.
        writer, written = _writing(url, after=200, batches=60)
        time.sleep(2)
        kafka_cluster3.stop_broker(1, kill=True)
        down.append(1)
        one_down_at = time.monotonic()
        writer.join(60)
        wait_until(lambda: persisted_watermark(url, config.bridge_name) == head_seq(url), 120,
                   "every event with one broker down")
        print(f"\none broker down: {written[0]} events published, caught up "
              f"{time.monotonic() - one_down_at:.1f}s after the kill")

        # Two brokers killed: no write can reach min.insync.replicas=2, so nothing may be acknowledged.
        stalled_at = persisted_watermark(url, config.bridge_name)
        kafka_cluster3.stop_broker(2, kill=True)
        down.append(2)
        insert_events(url, 300, start=written[0])
        target = head_seq(url)
        assert target == stalled_at + 300
        observed = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            observed.add(persisted_watermark(url, config.bridge_name))
            time.sleep(0.2)
        tracker = bridge.daemon.tracker
        assert tracker is not None
        print(f"two brokers down for 20s: persisted watermark(s) {sorted(observed)}, "
              f"in memory {tracker.watermark}, unacked {tracker.unacked_count}")
        assert observed == {stalled_at}, "the watermark moved while two brokers were down"
        assert tracker.watermark == stalled_at and tracker.unacked_count > 0
        assert bridge.thread.is_alive(), "the bridge keeps running while it waits"

        returned_at = time.monotonic()
        for node in list(down):
            kafka_cluster3.start_broker(node)
            down.remove(node)
        wait_until(lambda: persisted_watermark(url, config.bridge_name) == target, 150,
                   "publishing to resume after the brokers returned")
        print(f"resumed: watermark {target} {time.monotonic() - returned_at:.1f}s after the brokers were restarted")
        assert bridge.stop() == 0
    finally:
        for node in down:
            kafka_cluster3.start_broker(node)
        if bridge.thread.is_alive():
            bridge.daemon.stop()
            bridge.thread.join(60)

    counts = seq_counts(read_topic(kafka_cluster3.bootstrap, topic))
    duplicates = sum(counts.values()) - len(counts)
    print(f"{len(counts)} distinct events in Kafka, {duplicates} duplicates, "
          f"{bridge.daemon.metrics.producer_rebuilds._value.get():.0f} producer rebuilds")
    assert set(counts) == set(range(1, target + 1)), "every event is in Kafka"


def _transaction_coordinator(bootstrap: str, transactional_id: str) -> int:
    """The broker leading the `__transaction_state` partition of `transactional_id`: its coordinator
    (Kafka: abs(String.hashCode) modulo the partition count)."""
    h = 0
    for unit in transactional_id.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    partitions = AdminClient({"bootstrap.servers": bootstrap}).list_topics("__transaction_state", timeout=30)
    state = partitions.topics["__transaction_state"].partitions
    return state[(0 if signed == -(1 << 31) else abs(signed)) % len(state)].leader


def test_exactly_once_with_the_transaction_coordinator_killed_mid_run_shows_every_event_once(
    kafka_cluster3, postgres_url
) -> None:
    url = postgres_url
    upgrade(url)
    kafka_cluster3.start_all()
    config = bridge_config(url, kafka_cluster3.bootstrap, replication_factor=3, allow_single_broker=False,
                           persist_interval_s=0.2, lease_timeout_s=10, delivery=DeliveryMode.EXACTLY_ONCE,
                           transaction_interval_ms=100)
    topic = config.topic_for("order")
    bridge = start_bridge(config)
    killed: list[int] = []
    try:
        insert_events(url, 200)
        wait_until(lambda: persisted_watermark(url, config.bridge_name) == 200, 60, "the first 200 events")
        coordinator = _transaction_coordinator(kafka_cluster3.bootstrap, transactional_id(config.bridge_name))
        writer, written = _writing(url, after=200, batches=60)
        time.sleep(2)
        kafka_cluster3.stop_broker(coordinator, kill=True)
        killed.append(coordinator)
        killed_at = time.monotonic()
        writer.join(60)
        wait_until(lambda: persisted_watermark(url, config.bridge_name) == head_seq(url), 150,
                   "every event with the coordinator's broker down")
        caught_up_s = time.monotonic() - killed_at
        assert bridge.stop() == 0
    finally:
        for node in killed:
            kafka_cluster3.start_broker(node)
        if bridge.thread.is_alive():
            bridge.daemon.stop()
            bridge.thread.join(60)

    records = read_topic(kafka_cluster3.bootstrap, topic, isolation_level="read_committed")
    counts = seq_counts(records)
    aborted = len(read_topic(kafka_cluster3.bootstrap, topic, isolation_level="read_uncommitted")) - len(records)
    rebuilds = bridge.daemon.metrics.producer_rebuilds._value.get()
    print(f"\nexactly-once, transaction coordinator (broker {coordinator}) killed: {written[0]} events, caught up "
          f"{caught_up_s:.1f}s after the kill; read_committed {len(records)} records, {len(counts)} distinct; "
          f"{aborted} records of aborted transactions; {rebuilds:.0f} producer rebuilds")
    assert set(counts) == set(range(1, written[0] + 1)), "every event is visible to read_committed consumers"
    assert set(counts.values()) == {1}, "and once"
    disordered = {key: seqs for key, seqs in keys_in_seq_order(records).items() if seqs != sorted(seqs)}
    assert not disordered, f"aggregates out of seq order: {list(disordered)[:5]}"
