"""The Kafka side of a measurement: how many records a topic holds over time, and reading them back.

Progress is the sum of the partitions' high watermarks: with acks=all a record counts once every
in-sync replica has it, which is when the producer gets its ack.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

TIMESTAMP_LOG_APPEND_TIME = 2  # confluent_kafka.TIMESTAMP_LOG_APPEND_TIME


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", **extra})


@dataclass
class Progress:
    """Samples of (monotonic seconds, records in the topic) and the derived steady rate."""

    samples: list[tuple[float, int]]
    started_at: float
    total: int

    def rate(self) -> dict[str, float]:
        """Events/s from the first sample with records to the sample that saw them all, and wall time."""
        first = next((s for s in self.samples if s[1] > 0), None)
        last = next((s for s in self.samples if s[1] >= self.total), None)
        if first is None or last is None or last[0] <= first[0]:
            return {"events_per_s": 0.0, "wall_s": 0.0, "steady_s": 0.0}
        return {
            "events_per_s": (last[1] - first[1]) / (last[0] - first[0]),
            "steady_s": last[0] - first[0],
            "wall_s": last[0] - self.started_at,
            "first_record_after_s": first[0] - self.started_at,
        }


class TopicWatch:
    """Polls a topic's total record count (high watermarks) on a fixed interval. `committed`: the last stable
    offsets instead, what a read_committed consumer may read (the same on a topic without transactions; with them,
    each committed transaction's marker takes an offset too, one per partition it wrote)."""

    def __init__(self, bootstrap: str, topic: str, committed: bool = False) -> None:
        self.topic = topic
        self._consumer = _consumer(bootstrap)
        self._admin = AdminClient({"bootstrap.servers": bootstrap}) if committed else None
        self._partitions: list[int] = []

    def count(self) -> int:
        if not self._partitions:
            described = self._consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if described is None or described.error is not None or not described.partitions:
                return 0
            self._partitions = sorted(described.partitions)
        if self._admin is not None:
            asked = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in self._partitions}
            answers = self._admin.list_offsets(asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
            return sum(future.result().offset for future in answers.values())
        return sum(
            self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
            for p in self._partitions
        )

    def wait_for(self, total: int, timeout: float, started_at: float | None = None, interval: float = 0.1,
                 check: Callable[[], None] | None = None) -> Progress:
        """Sample until the topic holds `total` records; `check` may raise to abort (e.g. bridge died)."""
        started = time.monotonic() if started_at is None else started_at
        samples: list[tuple[float, int]] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                count = self.count()
            except KafkaException:
                count = samples[-1][1] if samples else 0
            now = time.monotonic()
            samples.append((now, count))
            if count >= total:
                return Progress(samples, started, total)
            if now > deadline:
                raise TimeoutError(f"topic {self.topic} holds {count} of {total} records after {timeout:.0f}s")
            if check is not None:
                check()
            time.sleep(interval)

    def settle(self, expected: int | None, watermark: Callable[[], int], head: int, timeout: float = 300,
               quiet_s: float = 3.0) -> int:
        """Wait until the topic holds `expected` records, or the bridge's watermark has reached `head` and
        the count has not moved for `quiet_s` (events it skipped will never come); return the count."""
        deadline = time.monotonic() + timeout
        last_count, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            count = self.count()
            if expected is not None and count >= expected:
                return count
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            elif time.monotonic() - last_change >= quiet_s and watermark() >= head:
                return count
            time.sleep(0.2)
        return self.count()

    def close(self) -> None:
        self._consumer.close()


def read_all(bootstrap: str, topic: str, timeout: float = 300) -> Iterator[Message]:
    """Every record currently in the topic, partition by partition in offset order."""
    # The end of a partition as librdkafka sees it too: a transaction's marker (exactly-once delivery) takes the
    # last offset and is never delivered as a record.
    consumer = _consumer(bootstrap, **{"fetch.max.bytes": 64 * 1024 * 1024,
                                       "max.partition.fetch.bytes": 16 * 1024 * 1024, "enable.partition.eof": True})
    try:
        described = consumer.list_topics(topic, timeout=30).topics[topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in described.partitions}
        remaining = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in remaining])
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: partitions {sorted(remaining)} not finished in {timeout}s")
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        remaining.discard(msg.partition())
                    continue
                yield msg
                if msg.offset() + 1 >= ends[msg.partition()]:
                    remaining.discard(msg.partition())
    finally:
        consumer.close()


def header(msg: Message, name: str) -> bytes | None:
    for key, value in msg.headers() or []:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def partition_ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = _consumer(bootstrap)
    try:
        described = consumer.list_topics(topic, timeout=30).topics[topic]
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in described.partitions}
    finally:
        consumer.close()



class VisibleTimes:
    """A read_committed consumer reading a topic along, on its own thread: the wall-clock time at which each event
    (by the number ending its event_id) first reached it. Fetches wait at most 5 ms for data, so an idle poll adds
    little to what it measures."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.seen: dict[int, float] = {}
        self._consumer = _consumer(bootstrap, **{"isolation.level": "read_committed", "fetch.wait.max.ms": 5})
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="visible-times", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            # One record per poll, which returns as soon as one is there: a batch would wait for its last.
            msg = self._consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                now = time.time()
                index = int((header(msg, "event_id") or b"-0").decode().rsplit("-", 1)[1])
                self.seen.setdefault(index, now)

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.seen) < count and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> dict[int, float]:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()
        return self.seen
