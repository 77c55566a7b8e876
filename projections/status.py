"""`outbox-projections status NAME`: where a projection's table, checkpoint and quarantine are, its progress
record (with where the table's history starts and the oldest event time it can hold) and, asked with `--lag`,
how many records Kafka holds beyond it."""

from __future__ import annotations

import json
from typing import Any

from projections.declaration import Projection
from projections.lake import Lake, is_local
from projections.progress import read_progress
from projections.settings import Settings


def status_command(projection: Projection, settings: Settings, *, lag: bool, json_output: bool) -> int:
    """Print the status report (text or JSON); Spark starts only to read a progress record off a remote lake."""
    lake = Lake(settings.lake)
    spark = None
    if not is_local(lake.root):
        from projections.session import build_session

        spark = build_session(app_name=f"projection-status-{projection.name}")
    progress = read_progress(lake, projection.name, spark)
    report: dict[str, Any] = {
        "projection": projection.name,
        "kind": projection.kind.name,
        "table": lake.table(projection.name),
        "checkpoint": lake.checkpoint(projection.name),
        "quarantine": lake.quarantine(projection.name),
        "progress": None if progress is None else json.loads(progress.to_json()),
        "oldest_event_time": None if progress is None else progress.oldest_event_time,
    }
    if lag and progress is not None:
        report["lag"] = kafka_lag(settings, projection.name, progress.offsets)
    if json_output:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(f"projection {projection.name} ({projection.kind.name})\n  table      {report['table']}")
    if progress is None:
        print("  no batch applied yet")
        return 0
    print(f"  batch      {progress.batch_id} at {progress.updated_at}")
    print(f"  max seq    {progress.max_seq}\n  last event {progress.last_event_time}")
    print(f"  history    {history_line(progress.history)}")
    if progress.history is not None:
        print(f"  oldest event the table can hold: {progress.oldest_event_time or 'none applied yet'}")
    for topic, partitions in progress.offsets.items():
        print(f"  {topic}: " + ", ".join(f"p{p}@{o}" for p, o in partitions.items()))
    if "lag" in report:
        print(f"  lag        {report['lag']}")
    return 0


def history_line(history: dict[str, Any] | None) -> str:
    """Where the table's history starts, in one line."""
    if history is None:
        return "not noted (built before histories were noted; a replay notes it)"
    if history.get("complete"):
        return f"complete: read from offset 0 of every partition (checked {history.get('checked_at')})"
    deleted = history.get("deleted_before") or {}
    if deleted:
        cut = ", ".join(f"{topic}[{partition}] from offset {offset}" for topic, parts in sorted(deleted.items())
                        for partition, offset in parts.items())
        accepted = " (accepted with --accept-truncated-history)" if history.get("accepted_truncated") else ""
        return f"cut by retention: {cut}; earlier events are not in the table{accepted}"
    return f"from {history.get('starting_offsets')}: only what followed that start"


def kafka_lag(settings: Settings, name: str, offsets: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Records in Kafka beyond the recorded offsets, per topic: how far the table is from the stream's end."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from projections.kafka_clients import consumer_conf, group_prefix

    bootstrap = settings.bootstrap_servers
    consumer = Consumer(consumer_conf(settings, f"{group_prefix(name)}status") | {"enable.auto.commit": False})
    lag: dict[str, Any] = {}
    try:
        for topic, partitions in offsets.items():
            total = 0
            for partition, offset in partitions.items():
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, int(partition)), timeout=5)
                total += max(0, high - offset)
            lag[topic] = total
    except KafkaException as exc:
        lag["error"] = f"Kafka at {bootstrap} did not answer: {exc}"
    finally:
        consumer.close()
    return lag
