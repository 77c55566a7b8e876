"""Replaying a projection from a chosen point in its topics.

`--from-offset` takes `earliest`, `latest`, Spark's per-partition JSON (`{"topic":{"0":42}}`), a time
(ISO 8601 with an offset, e.g. `2026-11-22T10:00:00Z`, or `ts:<epoch ms>`: the first record per partition
whose Kafka timestamp is at or after it) or a seq (`seq:<N>` or a bare number: the first record per
partition whose `seq` header is at least N). Times and seqs are turned into per-partition offsets here,
before Spark starts, so the replay starts exactly where the operator saw it would.

By default the replay builds a new table beside the live one: a lake of its own under
`<lake>/_replays/<name>/<id>` (new checkpoint, so a new txnAppId), drained to the end of what Kafka holds.
Then it waits for the live instance to stop (the projection's lock), drains what arrived meanwhile, and
switches over: the live table is overwritten with the new one in a single Delta commit, so a reader sees
the old table or the new one, never a half-built one; the new checkpoint, staging and progress record
take the old ones' places and the new quarantine entries join the old. `in_place` replays into the live
table instead (reset checkpoint, every kind is idempotent).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from bridge.errors import ConfigurationError
from projections import runner
from projections.declaration import Projection
from projections.errors import ProjectionError, RefusedError
from projections.lake import Lake, delete_path, move_path, write_text
from projections.lock import ProjectionLock
from projections.progress import read_progress, write_progress
from projections.settings import Settings

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from pyspark.sql import SparkSession

    from projections.metrics import ProjectionMetrics

log = logging.getLogger(__name__)

# Spark's per-partition JSON: -2 is the earliest offset, -1 the latest.
EARLIEST: Final = -2
LATEST: Final = -1
_SEQ = re.compile(r"^(?:seq:)?(\d+)$")
_EPOCH_MS = re.compile(r"^ts:(\d+)$")
KAFKA_TIMEOUT_S: Final = 15.0


@dataclass(frozen=True)
class StartingPoint:
    """Where a replay starts, as asked (`spec`) and as the Kafka source takes it (`offsets`)."""

    spec: str
    kind: str  # earliest, latest, offsets, timestamp or seq
    offsets: str  # Spark's startingOffsets: earliest, latest or per-partition JSON

    def describe(self) -> str:
        return self.spec if self.kind in ("earliest", "latest") else f"{self.spec} -> {self.offsets}"


def parse_from_offset(text: str) -> tuple[str, Any]:
    """Classify a --from-offset value: (kind, value); ConfigurationError naming the forms it accepts."""
    value = text.strip()
    if value in ("earliest", "latest"):
        return value, value
    if value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise ConfigurationError(f"--from-offset {text!r} is not valid JSON ({exc})") from None
        return "offsets", _check_offsets_json(parsed, text)
    seq = _SEQ.match(value)
    if seq:
        return "seq", int(seq.group(1))
    epoch = _EPOCH_MS.match(value)
    if epoch:
        return "timestamp", int(epoch.group(1))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigurationError(
            f"--from-offset {text!r}: use earliest, latest, per-partition JSON like "
            '\'{"outbox.event.order":{"0":42,"1":-2}}\', a time with its UTC offset like 2026-11-22T10:00:00Z '
            "(or ts:<epoch ms>), or a seq like seq:1200"
        ) from None
    if moment.tzinfo is None:
        raise ConfigurationError(
            f"--from-offset {text!r} has no UTC offset; write it as {value}Z (UTC) or with +HH:MM"
        )
    return "timestamp", int(moment.timestamp() * 1000)


def _check_offsets_json(parsed: Any, text: str) -> dict[str, dict[str, int]]:
    problem = f'--from-offset {text!r}: expected {{"topic": {{"partition": offset, ...}}, ...}} with offsets >= -2'
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigurationError(problem)
    out: dict[str, dict[str, int]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise ConfigurationError(problem)
        out[topic] = {}
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or not isinstance(offset, int) or isinstance(offset, bool):
                raise ConfigurationError(problem)
            if offset < EARLIEST:
                raise ConfigurationError(problem)
            out[topic][str(int(partition))] = offset
    return out


# ------------------------------------------------------------------------------------- Kafka lookups


def _consumer(settings: Settings, projection: Projection) -> Consumer:
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


def _record_at(consumer: Consumer, topic: str, partition: int, offset: int, high: int) -> Any:
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
        message = _record_at(consumer, topic, partition, mid, hi)
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
    consumer = _consumer(settings, projection)
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


# ---------------------------------------------------------------------------------------- replaying


@dataclass(frozen=True)
class ReplayResult:
    """What a replay into a new table did."""

    replay_id: str
    starting: StartingPoint
    record: str  # the replay's record file
    rows: int  # rows in the table after the switch
    built_s: float
    waited_s: float


def new_replay_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def replay_into_new_table(
    spark: SparkSession,
    projection: Projection,
    settings: Settings,
    starting: StartingPoint,
    lock: ProjectionLock,
    *,
    wait_s: float | None = None,
    metrics: ProjectionMetrics | None = None,
    replay_id: str | None = None,
    announce: Callable[[str], None] = lambda _: None,
) -> ReplayResult:
    """Build the projection from `starting` into a new table, then switch the live one over to it.

    Waits for the live instance to stop (up to `wait_s`, or for as long as it takes) before switching,
    and returns holding `lock`, so the caller can go on as the live instance. If the wait runs out the
    new table is left where it was built and RefusedError says how to finish or discard it.
    """
    lake = Lake(settings.lake)
    replay_id = replay_id or new_replay_id()
    shadow = Lake(f"{lake.replays(projection.name)}/{replay_id}")
    shadow_settings = dataclasses.replace(
        settings, lake=shadow.root, starting_offsets=starting.offsets, available_now=True
    )
    record: dict[str, Any] = {
        "projection": projection.name,
        "replay_id": replay_id,
        "from_offset": starting.spec,
        "starting_offsets": starting.offsets,
        "new_table": shadow.table(projection.name),
        "live_table": lake.table(projection.name),
        "started_at": datetime.now(UTC).isoformat(),
    }
    record_path = f"{lake.replays(projection.name)}/{replay_id}.json"

    def save_record(state: str, **more: Any) -> None:
        record.update(state=state, **more)
        write_text(record_path, json.dumps(record, indent=2) + "\n", spark)

    save_record("building")
    announce(f"building {projection.name} from {starting.describe()} into {shadow.table(projection.name)}")
    started = time.monotonic()
    runner.run(spark, projection, shadow_settings, metrics)
    built_s = time.monotonic() - started
    announce(
        f"caught up with Kafka in {built_s:.1f}s; waiting for the live instance of {projection.name} to stop "
        f"(lock {lock.path}) to switch over"
    )
    waiting = time.monotonic()
    if not lock.acquire(
        wait_s,
        on_wait=lambda waited: announce(f"still waiting for {lock.holder()} to stop ({waited:.0f}s)"),
    ):
        save_record("built, not switched")
        raise RefusedError(
            f"the live instance of {projection.name} ({lock.holder()}) did not stop within {wait_s:.0f}s, so "
            f"the table was not switched. The new table stays at {shadow.table(projection.name)}; stop the "
            f"live instance and replay again, or delete {shadow.root}"
        )
    waited_s = time.monotonic() - waiting
    try:
        # What arrived while the live instance was still running: the same checkpoint resumes.
        runner.run(spark, projection, shadow_settings, metrics)
        rows = _switch(spark, projection, lake, shadow)
    except BaseException:
        lock.release()
        raise
    save_record("switched", switched_at=datetime.now(UTC).isoformat(), rows=rows, built_s=round(built_s, 3),
                waited_s=round(waited_s, 3))
    delete_path(shadow.root, spark)
    announce(f"switched {projection.name} over to the replayed table ({rows} rows)")
    log.info("replay switched over", extra=record)
    return ReplayResult(replay_id, starting, record_path, rows, built_s, waited_s)


def _switch(spark: SparkSession, projection: Projection, lake: Lake, shadow: Lake) -> int:
    """Make the replayed table, checkpoint, staging and progress the live ones.

    The table goes first, in one Delta commit (readers see the old or the new table). Should the process
    die before the checkpoint is moved, the old checkpoint resumes against the new table and, every kind
    being idempotent, brings it to the same state.
    """
    name = projection.name
    (
        # The build created the table before its first batch (`runner.prepare`), so it exists even if empty.
        spark.read.format("delta").load(shadow.table(name)).write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("userMetadata", f"outbox-projections replay switch-over from {shadow.root}")
        .save(lake.table(name))
    )
    if not move_path(shadow.staging(name), lake.staging(name), spark):
        delete_path(lake.staging(name), spark)
    move_path(shadow.checkpoint(name), lake.checkpoint(name), spark)
    progress = read_progress(shadow, name, spark)
    if progress is None:
        delete_path(lake.progress(name), spark)
    else:
        write_progress(lake, dataclasses.replace(progress, table=lake.table(name)), spark)
    _merge_quarantine(spark, shadow.quarantine(name), lake.quarantine(name), name)
    return int(spark.read.format("delta").load(lake.table(name)).count())


def _merge_quarantine(spark: SparkSession, source: str, target: str, name: str) -> None:
    from delta.tables import DeltaTable

    from projections import quarantine

    if DeltaTable.isDeltaTable(spark, source):
        quarantine.add(spark, target, name, spark.read.format("delta").load(source))


def reset_in_place(spark: SparkSession, projection: Projection, lake: Lake, rebuild: bool) -> bool:
    """Delete the live checkpoint (a new txnAppId comes with the next), and with `rebuild` the table too."""
    removed = delete_path(lake.checkpoint(projection.name), spark)
    if rebuild:
        for path in (lake.table(projection.name), lake.staging(projection.name), lake.progress(projection.name)):
            delete_path(path, spark)
    return removed
