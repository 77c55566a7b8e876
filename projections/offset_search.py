"""Finding where a replay starts in Kafka: per partition, the first record at or after a time (Kafka's
offset-by-time lookup) or the first whose `seq` header is at least N (a binary search, seqs growing along
a partition). A consumer in the projection's own group prefix asks, connecting as its source does.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

from projections.declaration import Projection
from projections.errors import ProjectionError, RefusedError
from projections.settings import Settings
from projections.starting_point import EARLIEST, StartingPoint, parse_from_offset

if TYPE_CHECKING:
    from confluent_kafka import Consumer

KAFKA_TIMEOUT_S: Final = 15.0


def lookup_consumer(settings: Settings, projection: Projection) -> Consumer:
    """A consumer for offset lookups, connecting as the projection's source does (security included), in a
    group under the projection's own prefix (its ACLs allow no other)."""
    from confluent_kafka import Consumer

    from projections.kafka_clients import consumer_conf, group_prefix

    config = consumer_conf(settings, f"{group_prefix(projection.name)}replay-{uuid.uuid4().hex[:8]}")
    config |= {"enable.auto.commit": False, "enable.partition.eof": True}
    return Consumer(config)


def _partitions(consumer: Consumer, projection: Projection, settings: Settings) -> dict[str, list[int]]:
    """The partitions the projection reads now: its topics, or those its pattern matches."""
    from confluent_kafka import KafkaException

    option, value = projection.source_option(settings.topic_template)
    try:
        metadata = consumer.list_topics(timeout=KAFKA_TIMEOUT_S)
    except KafkaException as exc:
        raise ProjectionError(f"Kafka at {settings.bootstrap_servers} did not answer: {exc}") from exc
    pattern = re.compile(value) if option == "subscribePattern" else None
    names = [t for t in metadata.topics if pattern.fullmatch(t)] if pattern else value.split(",")
    missing = sorted(t for t in names if t not in metadata.topics)
    if missing:
        raise RefusedError(
            f"projection {projection.name} reads {', '.join(missing)}, which Kafka at "
            f"{settings.bootstrap_servers} does not have; check BRIDGE_TOPIC_TEMPLATE or start from earliest"
        )
    if not names:
        raise RefusedError(f"no topic in Kafka matches projection {projection.name}'s pattern {value!r}")
    return {t: sorted(metadata.topics[t].partitions) for t in sorted(names)}


def _watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=KAFKA_TIMEOUT_S)
    return int(low), int(high)


def record_at(consumer: Consumer, topic: str, partition: int, offset: int, high: int) -> Any:
    """The first record at or after `offset` (below `high`), or None."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + KAFKA_TIMEOUT_S
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return None
            raise ProjectionError(f"reading {topic}[{partition}] at offset {offset}: {error}")
        return message if (message.offset() or 0) < high else None
    raise ProjectionError(f"no answer reading {topic}[{partition}] at offset {offset} within {KAFKA_TIMEOUT_S}s")


def _seq_of(message: Any) -> int:
    for key, value in message.headers() or []:
        if key == "seq":
            try:
                return int(value)
            except (TypeError, ValueError):
                break
    return -1  # no usable seq: such a record cannot be at or after any asked seq


def first_offset_with_seq(consumer: Consumer, topic: str, partition: int, seq: int) -> int:
    """The lowest offset whose record carries seq >= `seq` (binary search; seqs grow along a partition).

    Returns the end offset when no record qualifies yet, so records published later are still read.
    After a bridge rewind a partition holds a second copy of some seqs further on; the search then
    may land on either copy, and both start before every event from `seq` on.
    """
    low, high = _watermarks(consumer, topic, partition)
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi) // 2
        message = record_at(consumer, topic, partition, mid, hi)
        if message is None or _seq_of(message) >= seq:
            hi = mid  # nothing below `hi` from `mid` on is earlier: the answer is at or before mid
        else:
            lo = message.offset() + 1
    return lo


def offsets_for_time(consumer: Consumer, topic: str, partitions: list[int], epoch_ms: int) -> dict[str, int]:
    """Per partition, the first offset whose Kafka timestamp is at or after epoch_ms (else the end offset)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, epoch_ms) for p in partitions], timeout=KAFKA_TIMEOUT_S
        )
    except KafkaException as exc:
        raise ProjectionError(f"Kafka could not look up offsets by time in {topic}: {exc}") from exc
    out: dict[str, int] = {}
    for tp in found:
        offset = tp.offset
        if offset < 0:  # no record that late yet: start at the end, so later records are still read
            offset = _watermarks(consumer, topic, tp.partition)[1]
        out[str(tp.partition)] = int(offset)
    return out


def resolve(spec: str, projection: Projection, settings: Settings) -> StartingPoint:
    """Turn a --from-offset value into the Kafka source's startingOffsets, asking Kafka where needed."""
    kind, value = parse_from_offset(spec)
    if kind in ("earliest", "latest"):
        return StartingPoint(spec, kind, value)
    consumer = lookup_consumer(settings, projection)
    try:
        partitions = _partitions(consumer, projection, settings)
        offsets: dict[str, dict[str, int]] = {}
        if kind == "offsets":
            unknown = sorted(set(value) - set(partitions))
            if unknown:
                raise RefusedError(
                    f"--from-offset names {', '.join(unknown)}, which projection {projection.name} does not "
                    f"read (it reads {', '.join(partitions)})"
                )
            for topic, numbers in partitions.items():
                asked = value.get(topic, {})
                extra = sorted(set(asked) - {str(p) for p in numbers}, key=int)
                if extra:
                    raise RefusedError(
                        f"--from-offset names partitions {', '.join(extra)} of {topic}, which has "
                        f"partitions {', '.join(map(str, numbers))}"
                    )
                # Spark needs every partition; those not named start at the earliest offset.
                offsets[topic] = {str(p): asked.get(str(p), EARLIEST) for p in numbers}
        elif kind == "timestamp":
            for topic, numbers in partitions.items():
                offsets[topic] = offsets_for_time(consumer, topic, numbers, value)
        else:
            for topic, numbers in partitions.items():
                offsets[topic] = {str(p): first_offset_with_seq(consumer, topic, p, value) for p in numbers}
    finally:
        consumer.close()
    return StartingPoint(spec, kind, json.dumps(offsets, sort_keys=True, separators=(",", ":")))
