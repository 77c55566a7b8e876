"""A rebuild from earliest knows when Kafka has deleted the first records of a partition.

Real Kafka and Spark: the first records of one partition are deleted (the admin API's delete_records, as
retention would). A replay from earliest is refused (exit 5, nothing changed), its dry run says so naming
the partition and the first offset kept, and it runs when accepted explicitly; a run on a new checkpoint is
refused the same way. The progress record notes where the table's history starts, and `status` shows the
oldest event time the table can hold.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from bridge.doctor import Verdict
from projections import replay
from projections.cli import EXIT_REFUSED, main
from projections.doctor import ProjectionDoctor
from projections.errors import RefusedError
from projections.examples import order_events
from projections.history import ACCEPT_FLAG, find_history_start
from projections.lock import ProjectionLock
from projections.new_table import replay_into_new_table
from projections.progress import read_progress
from projections.status import status_command
from tests.integration.projections.conftest import Harness, on_topic
from tests.integration.projections.events import BASE_TIME, order_lifecycle, produce
from tests.integration.projections.test_replay import event_ids, positions

pytestmark = pytest.mark.integration

DELETED_BEFORE = 3  # in partition 0


def test_a_rebuild_from_earliest_of_a_cut_history_is_refused_and_runs_when_accepted(
    harness: Harness, topic_factory: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"hist{uuid.uuid4().hex[:8]}"
    topic = topic_factory(name=f"{prefix}.order", partitions=2)
    events = order_lifecycle(6)
    produce(harness.bootstrap, topic, events)
    where = positions(harness.bootstrap, topic)
    assert sum(partition == 0 for partition, _, _ in where.values()) > DELETED_BEFORE, "partition 0 got too few"
    admin = AdminClient({"bootstrap.servers": harness.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, DELETED_BEFORE)]).values():
        future.result(30)
    kept = {eid for eid, (partition, offset, _) in where.items() if partition == 1 or offset >= DELETED_BEFORE}
    lake = harness.lake("replayed")
    args = ["replay", order_events.name, "--from-offset", "earliest", "--lake", lake.root,
            "--bootstrap-servers", harness.bootstrap, "--topic-template", f"{prefix}.{{aggregate_type}}"]
    cut = f"{topic} partition 0 from offset {DELETED_BEFORE}"

    # The dry run says so, naming the partition and the first offset kept, and exits 5; so does the replay.
    assert main([*args, "--dry-run"]) == EXIT_REFUSED
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert plan["history"]["deleted_before"] == {topic: {"0": DELETED_BEFORE}} and cut in plan["history"]["says"]
    assert cut in captured.err and "Nothing changed" in captured.err and ACCEPT_FLAG in captured.err
    assert main([*args, "--yes"]) == EXIT_REFUSED
    assert cut in capsys.readouterr().err
    assert not Path(lake.root).exists()

    # In place without --rebuild the live table keeps what the deleted events made: reported, not refused.
    assert main([*args, "--in-place", "--dry-run"]) == 0
    assert "the live table keeps" in json.loads(capsys.readouterr().out)["history"]["says"]
    assert main([*args, "--dry-run", ACCEPT_FLAG]) == 0
    accepted_plan = json.loads(capsys.readouterr().out)
    assert accepted_plan["accept_truncated_history"] is True and accepted_plan["history"]["accepted_truncated"]

    # The projection's doctor warns that a rebuild would lack them.
    projection = on_topic(order_events, topic)
    checks = ProjectionDoctor(projection, harness.settings(lake)).run()
    assert [c.verdict for c in checks if c.name == "topics" and cut in c.summary] == [Verdict.WARNING]

    # A run on a new checkpoint (a table built from scratch) is refused before it creates anything.
    with pytest.raises(RefusedError, match=cut):
        harness.run([order_events], topic, lake)
    assert not Path(lake.root).exists(), "the refusal came after something was created"

    # Accepted explicitly, the replay builds from what Kafka still holds and notes where its history starts.
    settings = harness.settings(lake, accept_truncated_history=True)
    accepted = replay.plan_replay(projection, settings, replay.ReplayRequest("earliest"))
    assert accepted.refusal() is None
    with ProjectionLock(lake, order_events.name) as lock:
        replay_into_new_table(harness.spark, projection, settings, accepted.starting, lock, wait_s=30)
    assert event_ids(harness, lake) == kept
    progress = read_progress(lake, order_events.name)
    assert progress is not None and progress.history is not None
    assert progress.history["complete"] is False and progress.history["accepted_truncated"] is True
    assert progress.history["deleted_before"] == {topic: {"0": DELETED_BEFORE}}
    assert progress.history["first_offsets"][topic] == {"0": DELETED_BEFORE, "1": 0}
    # The events' times are BASE_TIME + seq seconds: the oldest the table holds is the oldest event kept.
    oldest = BASE_TIME + timedelta(seconds=min(e.seq for e in events if e.event_id in kept))
    assert progress.oldest_event_time is not None
    assert progress.oldest_event_time.startswith(oldest.strftime("%Y-%m-%dT%H:%M:%S"))

    # `status` shows where the history starts and the oldest event time the table can hold.
    assert status_command(projection, harness.settings(lake), lag=False, json_output=False) == 0
    text = capsys.readouterr().out
    assert f"cut by retention: {topic}[0] from offset {DELETED_BEFORE}" in text
    assert f"oldest event the table can hold: {progress.oldest_event_time}" in text
    assert status_command(projection, harness.settings(lake), lag=False, json_output=True) == 0
    assert json.loads(capsys.readouterr().out)["oldest_event_time"] == progress.oldest_event_time


def test_an_intact_topic_has_a_complete_history(harness: Harness) -> None:
    topic = harness.topic(order_lifecycle(2))
    projection = on_topic(order_events, topic)
    history = find_history_start(harness.settings(harness.lake("intact")), projection, "earliest")
    assert history.complete and not history.cut
    assert history.first_offsets == {topic: {"0": 0, "1": 0}}
    assert not find_history_start(harness.settings(harness.lake("intact")), projection, "latest").complete
