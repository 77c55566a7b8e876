"""Replaying a projection from a point in its topics, into a new table that replaces the live one.

Real Kafka, Spark and Delta: the replay builds beside the live table, waits for the live instance to stop,
switches over in one Delta commit, and the projection then runs on from the replay's checkpoint.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from projections import replay
from projections.errors import RefusedError
from projections.examples import order_events, orders_current
from projections.lake import Lake
from projections.lock import ProjectionLock
from projections.new_table import replay_into_new_table
from projections.offset_search import resolve
from projections.starting_point import EARLIEST
from tests.integration.projections.conftest import Harness, delta_log, on_topic
from tests.integration.projections.events import order_lifecycle, produce
from tests.support import read_topic

pytestmark = pytest.mark.integration


def delta_history(table: str) -> list[dict[str, Any]]:
    """The commits of a local Delta table, oldest first, from its log."""
    return [{"version": version, **a["commitInfo"]} for version, a in delta_log(table) if "commitInfo" in a]


def event_ids(harness: Harness, lake: Lake) -> set[str]:
    frame = harness.spark.read.format("delta").load(lake.table(order_events.name))
    return {r["event_id"] for r in frame.select("event_id").collect()}


def positions(bootstrap: str, topic: str) -> dict[str, tuple[int, int, int]]:
    """event_id -> (partition, offset, Kafka timestamp) of every record in the topic."""
    return {dict(m.headers() or [])["event_id"].decode(): (m.partition() or 0, m.offset() or 0, m.timestamp()[1])
            for m in read_topic(bootstrap, topic)}


def test_replay_from_earliest_builds_beside_the_live_table_and_switches_when_the_live_instance_stops(
    harness: Harness,
) -> None:
    first, second, third = order_lifecycle(6), order_lifecycle(4, start_seq=100), order_lifecycle(3, start_seq=200)
    topic = harness.topic(first)
    live = harness.lake("live")
    projection = on_topic(orders_current, topic)
    # The live table misses the first events (a consumer bug): it started at the end of the topic.
    harness.run([orders_current], topic, live, starting_offsets="latest")
    produce(harness.bootstrap, topic, second)
    harness.run([orders_current], topic, live)
    stale_rows = harness.rows(orders_current, live)
    stale_versions = len(delta_history(live.table(orders_current.name)))

    # A live instance is running: it holds the lock until the test lets it go.
    instance = ProjectionLock(live, orders_current.name)
    assert instance.acquire(0)
    seen_while_waiting: dict[str, Any] = {}

    def announce(message: str) -> None:
        if message.startswith("caught up"):
            # The new table is built; readers of the live table still see the old one, whole.
            seen_while_waiting["rows"] = harness.rows(orders_current, live)
            seen_while_waiting["replays"] = sorted(p.name for p in Path(live.replays(orders_current.name)).iterdir())
            threading.Timer(2.0, instance.release).start()

    switch = ProjectionLock(live, orders_current.name)
    starting = resolve("earliest", projection, harness.settings(live))
    result = replay_into_new_table(
        harness.spark, projection, harness.settings(live), starting, switch, wait_s=60, announce=announce
    )
    try:
        assert seen_while_waiting["rows"] == stale_rows
        assert any(name == result.replay_id for name in seen_while_waiting["replays"])
        assert result.waited_s >= 1.5, "the switch did not wait for the live instance to stop"
        assert switch.held, "the replay should hand the lock over to run on as the live instance"

        reference = harness.lake("reference")
        harness.run([orders_current], topic, reference)
        assert harness.rows(orders_current, live) == harness.rows(orders_current, reference)
        assert harness.rows(orders_current, live) != stale_rows

        # Exactly one commit more on the live table: the switch, an overwrite. No half-built state in between.
        history = delta_history(live.table(orders_current.name))
        assert len(history) == stale_versions + 1
        assert history[-1]["operation"] == "WRITE" and "Overwrite" in history[-1]["operationParameters"]["mode"]
        record = json.loads(Path(result.record).read_text())
        assert record["state"] == "switched" and record["from_offset"] == "earliest"
        assert not Path(live.replays(orders_current.name), result.replay_id).exists()
        progress = json.loads(Path(live.progress(orders_current.name)).read_text())
        assert progress["table"] == live.table(orders_current.name)
    finally:
        switch.release()

    # The projection runs on from the replay's checkpoint: new events only, and it still equals a scratch build.
    produce(harness.bootstrap, topic, third)
    harness.run_together([([orders_current], topic, live), ([orders_current], topic, reference)])
    assert harness.rows(orders_current, live) == harness.rows(orders_current, reference)


def test_replay_from_a_time_starts_at_the_first_record_at_or_after_it(harness: Harness) -> None:
    before, after = order_lifecycle(5), order_lifecycle(5, start_seq=100)
    topic = harness.new_topic("proj", partitions=2)
    now_ms = int(time.time() * 1000)
    cut_ms = now_ms - 300_000
    produce(harness.bootstrap, topic, before, timestamp_ms=now_ms - 600_000)  # ten minutes ago
    produce(harness.bootstrap, topic, after)  # now
    cut = datetime.fromtimestamp(cut_ms / 1000, UTC).isoformat()
    lake = harness.lake("from-time")
    projection = on_topic(order_events, topic)
    starting = resolve(cut, projection, harness.settings(lake))
    assert starting.kind == "timestamp"
    offsets = json.loads(starting.offsets)[topic]
    where = positions(harness.bootstrap, topic)
    for event in after:
        partition, offset, _ = where[event.event_id]
        assert offset >= offsets[str(partition)]
    for event in before:
        partition, offset, _ = where[event.event_id]
        assert offset < offsets[str(partition)]

    with ProjectionLock(lake, order_events.name) as lock:
        replay_into_new_table(harness.spark, projection, harness.settings(lake), starting, lock, wait_s=30)
    assert event_ids(harness, lake) == {e.event_id for e in after}


def test_replay_from_per_partition_offsets_starts_where_asked(harness: Harness) -> None:
    events = order_lifecycle(12)
    topic = harness.topic(events, partitions=2)
    where = positions(harness.bootstrap, topic)
    in_zero = sorted(offset for partition, offset, _ in where.values() if partition == 0)
    assert len(in_zero) > 4, "partition 0 got too few events for the test"
    start_zero = in_zero[3]
    lake = harness.lake("from-offsets")
    projection = on_topic(order_events, topic)
    # Partition 1 is not named: it starts at the earliest offset.
    starting = resolve(json.dumps({topic: {"0": start_zero}}), projection, harness.settings(lake))
    assert json.loads(starting.offsets) == {topic: {"0": start_zero, "1": EARLIEST}}

    with ProjectionLock(lake, order_events.name) as lock:
        replay_into_new_table(harness.spark, projection, harness.settings(lake), starting, lock, wait_s=30)
    expected = {eid for eid, (partition, offset, _) in where.items() if partition == 1 or offset >= start_zero}
    assert event_ids(harness, lake) == expected
    assert len(expected) < len(events)


def test_replay_from_a_seq_starts_at_the_first_record_carrying_it(harness: Harness) -> None:
    events = order_lifecycle(12)
    topic = harness.topic(events, partitions=2)
    from_seq = events[len(events) // 2].seq
    lake = harness.lake("from-seq")
    projection = on_topic(order_events, topic)
    starting = resolve(f"seq:{from_seq}", projection, harness.settings(lake))
    with ProjectionLock(lake, order_events.name) as lock:
        replay_into_new_table(harness.spark, projection, harness.settings(lake), starting, lock, wait_s=30)
    assert event_ids(harness, lake) == {e.event_id for e in events if e.seq >= from_seq}

    # A seq beyond every record starts at the end offsets, so what is published later is still read.
    beyond = resolve("seq:999999", projection, harness.settings(lake))
    where = positions(harness.bootstrap, topic)
    ends = {p: 1 + max(o for q, o, _ in where.values() if q == p) for p in (0, 1)}
    assert json.loads(beyond.offsets)[topic] == {str(p): ends[p] for p in (0, 1)}


def test_replay_refuses_offsets_of_a_topic_the_projection_does_not_read(harness: Harness) -> None:
    topic = harness.topic(order_lifecycle(2), partitions=2)
    projection = on_topic(order_events, topic)
    settings = harness.settings(harness.lake("refused"))
    with pytest.raises(RefusedError, match="does not read"):
        resolve('{"some.other.topic":{"0":1}}', projection, settings)
    with pytest.raises(RefusedError, match="partitions 7"):
        resolve(json.dumps({topic: {"7": 1}}), projection, settings)


def test_in_place_replay_resets_the_checkpoint_and_rebuilds_from_the_asked_point(harness: Harness) -> None:
    events = order_lifecycle(8)
    topic = harness.topic(events, partitions=2)
    lake = harness.lake("in-place")
    projection = on_topic(order_events, topic)
    harness.run([order_events], topic, lake)
    from_seq = events[-6].seq
    starting = resolve(f"seq:{from_seq}", projection, harness.settings(lake))
    assert replay.reset_in_place(harness.spark, projection, lake, rebuild=True)
    harness.run([order_events], topic, lake, starting_offsets=starting.offsets)
    assert event_ids(harness, lake) == {e.event_id for e in events if e.seq >= from_seq}
