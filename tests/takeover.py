"""A takeover set up and watched from outside: two instances of one bridge name behind `tests.kafkaproxy`, the
bridge's row in bridge_offsets sampled on a thread, and what each client got to the broker."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore
from tests.kafkaproxy import KafkaFaultProxy
from tests.support import BridgeProcess, Ledger, insert_events, wait_until, write_out_of_seq_order


@dataclass(frozen=True, slots=True)
class Sample:
    """The bridge's row in bridge_offsets, as read at wall-clock time `at` (after the read returned)."""

    at: float
    watermark: int
    epoch: int
    owner_pid: int | None
    status: dict[str, Any]


class OffsetsWatch:
    """Reads the bridge's row every 50 ms on its own thread, for the whole scenario."""

    def __init__(self, url: str, bridge_name: str) -> None:
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._engine = make_engine(url)
        self._store = OffsetStore(self._engine, bridge_name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offsets-watch", daemon=True)

    def __enter__(self) -> OffsetsWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._engine.dispose()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                row = self._store.read()
            except Exception as exc:  # noqa: BLE001 - recorded; the test fails on it
                self.errors.append(repr(exc))
            else:
                if row is not None:
                    pid = int(row.owner.split(":")[1]) if row.owner and row.lease_expires_at else None
                    self.samples.append(Sample(time.time(), row.watermark, row.epoch, pid, dict(row.status)))
            self._stop.wait(0.05)

    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def watermark(self) -> int:
        latest = self.latest()
        return latest.watermark if latest is not None else 0

    def last_of(self, pid: int) -> Sample:
        return [s for s in self.samples if s.owner_pid == pid][-1]


def produced_by(proxy: KafkaFaultProxy, client_id: str, after: float = 0.0,
                before: float = float("inf")) -> tuple[int, int]:
    """Produce requests, and their records, that `client_id` got to the broker between two monotonic times."""
    with proxy.lock:
        sent = [p for p in proxy.produced if p.client_id == client_id and after <= p.at < before]
    assert all(p.records is not None for p in sent), "every Produce request of the bridge parses"
    return len(sent), sum(p.records or 0 for p in sent)


def create_topic(bootstrap: str, topic: str) -> None:
    """The topic the bridge will check and use: 3 partitions, each record stamped with the broker's append time."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=3, replication_factor=1, config={"message.timestamp.type": "LogAppendTime"})
    admin.create_topics([new])[topic].result(timeout=30)


def warm_transactions(bootstrap: str) -> None:
    """Make the broker's transaction coordinator ready: a fresh broker creates and loads its transaction state at the
    first `init_transactions`, which meanwhile times out, so a scenario timed from the bridges' start would time
    that too. The bridge rides it out (tests/unit/bridge/daemon/test_exactly_once.py); the scenario need not."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"warm-{uuid.uuid4().hex}"})
    producer.init_transactions(60)


def leader_and_standby(watch: OffsetsWatch, spawn: Callable[[str, Path], BridgeProcess], client_ids: tuple[str, str],
                       logs: Path) -> tuple[BridgeProcess, BridgeProcess]:
    """Start one instance (`spawn(client_id, log)`) until it leads, then another until it stands by."""
    first = spawn(client_ids[0], logs / "first.log")
    try:
        wait_until(lambda: (s := watch.latest()) is not None and s.owner_pid == first.pid, 30,
                   "the first instance to lead")
        second = spawn(client_ids[1], logs / "second.log")
    except BaseException:
        first.stop_if_running()
        raise
    try:
        wait_until(lambda: second.logged("another instance holds the lease; standing by"), 30,
                   "the second instance to stand by")
    except BaseException:
        first.stop_if_running()
        second.stop_if_running()
        raise
    return first, second


def pile_up(url: str, proxy: KafkaFaultProxy, throttle_s: float, backlog: int, writers: int,
            aggregates: int) -> Ledger:
    """The broker holds each Produce response `throttle_s`; a backlog and 3 s of out-of-order commits pile up in
    the leader's producer."""
    proxy.throttle(throttle_s)
    insert_events(url, backlog, aggregates=aggregates)
    return write_out_of_seq_order(url, writers, 3.0, aggregates)


def queued(watch: OffsetsWatch, proxy: KafkaFaultProxy, process: BridgeProcess, client_id: str) -> int:
    """Events `process` had handed to librdkafka (its last status) that never reached the broker."""
    status = watch.last_of(process.pid).status
    return int(status["watermark"]) + int(status["in_flight"]) - produced_by(proxy, client_id)[1]
