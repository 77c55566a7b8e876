"""Helpers shared by integration tests: run a bridge in a thread, write events, read a topic back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from sqlalchemy import create_engine, text

from bridge.config import BridgeConfig, load_config
from bridge.daemon import BridgeDaemon


def bridge_config(db_url: str, bootstrap: str, **overrides: Any) -> BridgeConfig:
    """A bridge configuration for tests: unique topics, a one-broker cluster allowed, no metrics port."""
    flags: dict[str, Any] = {
        "db_url": db_url,
        "bootstrap_servers": bootstrap,
        "bridge_name": f"b-{uuid.uuid4().hex[:8]}",
        "topic_template": f"t{uuid.uuid4().hex[:8]}.{{aggregate_type}}",
        "allow_single_broker": True,
        "replication_factor": 1,
        "topic_partitions": 3,
        "metrics_port": 0,
        "persist_interval_s": 0.2,
        "lease_timeout_s": 3.0,
    }
    flags.update(overrides)
    return load_config(flags=flags, env={})


@dataclass
class RunningBridge:
    daemon: BridgeDaemon
    thread: threading.Thread
    result: list[int]

    def stop(self, timeout: float = 60) -> int:
        self.daemon.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "bridge did not stop"
        return self.result[0]


def start_bridge(config: BridgeConfig, **kwargs: Any) -> RunningBridge:
    daemon = BridgeDaemon(config, **kwargs)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()), daemon=True)
    thread.start()
    return RunningBridge(daemon, thread, result)


def insert_events(db_url: str, count: int, aggregate_type: str = "order", aggregates: int = 10,
                  start: int = 0) -> None:
    """Insert events with plain SQL, as any application would."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                 "VALUES (:event_id, :aggregate_type, :aggregate_id, :event_type, :payload)"),
            [
                {"event_id": f"e-{start + i}-{uuid.uuid4().hex[:6]}", "aggregate_type": aggregate_type,
                 "aggregate_id": f"a-{(start + i) % aggregates}", "event_type": "OrderPlaced",
                 "payload": f'{{"n": {start + i}, "note": "x"}}'}
                for i in range(count)
            ],
        )
    engine.dispose()


def head_seq(db_url: str) -> int:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        value = conn.execute(text("SELECT max(seq) FROM domain_events")).scalar()
    engine.dispose()
    return int(value or 0)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def read_topic(bootstrap: str, topic: str, timeout: float = 60) -> list[Any]:
    """Every record currently in a topic (all partitions), as confluent-kafka messages."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    metadata = consumer.list_topics(topic, timeout=30)
    partitions = list(metadata.topics[topic].partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[Any] = []
    done = {p: ends[p] == 0 for p in partitions}
    deadline = time.monotonic() + timeout
    while not all(done.values()) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        out.append(msg)
        if msg.offset() + 1 >= ends[msg.partition()]:
            done[msg.partition()] = True
    consumer.close()
    return out
