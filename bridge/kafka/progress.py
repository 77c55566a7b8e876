"""The progress topic of exactly-once delivery: what Kafka committed, as the last seq each transaction covers.

Every transaction of the `TransactionalPublisher` carries, beside its events, one record to this topic: key the
bridge name, value the highest seq of the transaction and the event_id of its event, as JSON. Rows are sent in
seq order and the transactions commit one after another, so once one commits, every seq up to its value is
committed too (or a hole the hole rule settled). Kafka Connect keeps a source connector's offsets the same way.
The topic is compacted and keeps one record per bridge name; a restart reads the latest committed one
(`committed_progress`, with `isolation.level=read_committed`, after its own producer fenced the previous leader's)
and resumes after it, but only if the outbox holds that event at that seq (`trusted`): a bridge name reused on a
new or restored database must not skip that database's events because another history reached further.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bridge.errors import TopicSafetyError
from bridge.kafka.reachability import quiet_client_settings
from bridge.kafka.topics import TopicGuard, TopicPolicy, TopicProblem, TopicReport

log = logging.getLogger("bridge.kafka.progress")

#: How many offsets before the end a read for the latest record starts: a committed transaction leaves its
#: record and a commit marker, an aborted one a record and an abort marker. Widened fourfold while none is found.
_TAIL: Final = 64


@dataclass(frozen=True, slots=True)
class Progress:
    """What a progress record says: Kafka committed everything up to `seq`, whose event is `event_id` (None for a
    rewind's mark, which names no event)."""

    seq: int
    event_id: str | None = None


def progress_value(seq: int, event_id: str | None = None) -> bytes:
    """A progress record's value: `{"seq": 42, "event_id": "..."}`."""
    return json.dumps({"seq": seq, "event_id": event_id}).encode()


def parse_progress(value: bytes) -> Progress:
    parsed = json.loads(value)
    if isinstance(parsed, int):  # the decimal text of earlier records
        return Progress(parsed)
    return Progress(int(parsed["seq"]), parsed.get("event_id"))


def trusted(progress: Progress | None, event_id_at: Callable[[int], str | None]) -> int | None:
    """`progress.seq` if the outbox holds the event it names at that seq (`event_id_at`); None otherwise, with a
    warning: the restart then resumes from the database's watermark, sending again what Kafka may already have
    rather than skipping what it may not."""
    if progress is None:
        return None
    if progress.event_id is not None and event_id_at(progress.seq) == progress.event_id:
        return progress.seq
    log.warning("Kafka's progress for this bridge name is not this outbox's (a new or restored database, or another "
                "outbox under the same name): resuming from the database's watermark; events Kafka already has may "
                "be sent again", extra={"progress_seq": progress.seq, "progress_event_id": progress.event_id})
    return None


def committed_progress(client_conf: Mapping[str, Any], topic: str, key: bytes,
                       timeout: float = 30.0) -> Progress | None:
    """The latest committed progress record of `key` in `topic`; None when there is none (the topic is new or
    missing). Raises KafkaException when Kafka does not answer within `timeout`."""
    servers = str(client_conf.get("bootstrap.servers", ""))
    consumer = Consumer({
        **quiet_client_settings(servers), **client_conf,
        "group.id": f"outbox-bridge-progress-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 50,
    })
    deadline = time.monotonic() + timeout
    try:
        described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if described is None or described.error is not None:
            if described is not None and described.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaException(described.error)
            return None
        found: Progress | None = None
        for partition in sorted(described.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            span = _TAIL
            while high > low:
                start = max(low, high - span)
                latest = _latest(consumer, TopicPartition(topic, partition, start), high, key, deadline)
                if latest is not None:
                    found = latest  # one partition: the progress topic is made with one
                    break
                if start == low:
                    break
                span *= 4
        return found
    finally:
        consumer.close()


def _latest(consumer: Consumer, start: TopicPartition, end: int, key: bytes, deadline: float) -> Progress | None:
    """The value of the last committed record of `key` from `start` to `end` (the partition's end when the read
    began; with read_committed the end of what is committed)."""
    consumer.assign([start])
    latest: Progress | None = None
    position = start.offset
    while position < end:
        if time.monotonic() > deadline:
            why = f"reading the progress topic {start.topic} timed out at offset {position} of {end}"
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, why))
        for msg in consumer.consume(num_messages=1000, timeout=0.1):
            err, offset = msg.error(), msg.offset()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                position = end  # the rest are transaction markers, or a transaction still open: not committed
                break
            if offset is not None:
                position = offset + 1
            value = msg.value()
            if msg.key() == key and value is not None:
                latest = parse_progress(value)
    consumer.unassign()
    return latest


class ProgressTopic:
    """Creates and checks the progress topic: one partition, compacted, replicated as the bridge's other topics."""

    def __init__(self, client_conf: Mapping[str, Any], policy: TopicPolicy, topic: str, allow_create: bool) -> None:
        self._conf = dict(client_conf)
        # Keeps every record's latest value: compaction removes only those a later one of the same key replaced.
        self._policy = replace(policy, partitions=1, retention_ms=-1)
        self._topic = topic
        self._allow_create = allow_create

    def ensure(self) -> TopicReport:
        """Check the topic, creating it if missing and allowed; raise TopicSafetyError if it is unsafe or not
        compacted."""
        report = self.inspect(create=True)
        if not report.exists and not self._allow_create:
            raise TopicSafetyError(
                f"the progress topic {self._topic} does not exist and BRIDGE_ALLOW_CREATE_TOPICS is false; "
                "create it with one partition, cleanup.policy=compact and the replication of the event topics")
        if report.problems:
            raise TopicSafetyError("; ".join(map(str, report.problems)))
        return report

    def inspect(self, create: bool) -> TopicReport:
        """The topic's report, not compacted counting as a problem; created first when missing, `create` and
        allowed (`outbox-bridge topics check` and `ensure`)."""
        guard = TopicGuard(self._conf, self._policy)
        report = guard.check(self._topic)
        if not report.exists and create and self._allow_create:
            self._create(guard)
            report = guard.settle(self._topic)
        if report.cleanup_policy is not None and "compact" not in report.cleanup_policy:
            report.problems.append(TopicProblem(
                f"the progress topic {self._topic} has cleanup.policy={report.cleanup_policy}: it would lose the "
                "last committed seq when its retention runs out", "set cleanup.policy=compact"))
        return report

    def _create(self, guard: TopicGuard) -> None:
        brokers = guard.broker_count()
        rf = self._policy.effective_replication(brokers)
        if rf > brokers:
            raise TopicSafetyError(
                f"cannot create the progress topic {self._topic} with replication factor {rf} on a {brokers}-broker "
                "cluster; add brokers, lower BRIDGE_REPLICATION_FACTOR, or for development set "
                "BRIDGE_ALLOW_SINGLE_BROKER=true")
        new = NewTopic(self._topic, num_partitions=1, replication_factor=rf, config={
            "cleanup.policy": "compact",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "min.insync.replicas": str(TopicPolicy.min_isr(rf)),
            "unclean.leader.election.enable": "false",
            # Rolled hourly, so compaction can drop the replaced records: one per transaction otherwise piles up.
            "segment.ms": str(3_600_000),
        })
        admin = AdminClient({**self._conf, **quiet_client_settings(str(self._conf["bootstrap.servers"]))})
        try:
            admin.create_topics([new])[self._topic].result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        log.info("created the progress topic", extra={"topic": self._topic, "rf": rf})
