"""A projection stopped in the middle of a run and restarted from its checkpoint ends as an uninterrupted run."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from projections import runner
from projections.applier import BatchApplier
from projections.examples import order_events_per_minute, order_status_fold, orders_current, orders_history
from projections.lake import Lake
from tests.integration.projections.conftest import Harness, delta_log, on_topic
from tests.integration.projections.events import order_lifecycle

PROJECTIONS = (orders_current, order_status_fold, order_events_per_minute, orders_history)


class Crash(RuntimeError):
    """Stands for the driver dying after a batch's Delta commits and before Spark's checkpoint commit."""


def txn_versions(table: str) -> list[tuple[str, int]]:
    """The (txnAppId, txnVersion) of every commit of a local Delta table, from its log."""
    return [(a["txn"]["appId"], int(a["txn"]["version"])) for _, a in delta_log(table) if "txn" in a]


def test_crash_after_delta_commit_then_restart_matches_uninterrupted_run(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = harness.topic(order_lifecycle(8))
    reference, interrupted = harness.lake("reference"), harness.lake("interrupted")
    crashing = PROJECTIONS[:3]  # one table, a fold, and a kind writing two tables per batch
    harness.run(crashing, topic, reference)

    # Small batches; the driver "dies" at batch 1 after writing the tables, before the checkpoint commit.
    record = BatchApplier.record
    crashed: set[str] = set()

    def record_or_crash(self: BatchApplier, session: Any, batch_id: int, stats: Any) -> None:
        if batch_id == 1 and self.projection.name not in crashed:
            crashed.add(self.projection.name)
            raise Crash(f"{self.projection.name} dies after the Delta commit of batch 1")
        record(self, session, batch_id, stats)

    monkeypatch.setattr(BatchApplier, "record", record_or_crash)
    queries = [
        runner.start(
            harness.spark, on_topic(p, topic), harness.settings(interrupted, max_offsets_per_trigger=6)
        )
        for p in crashing
    ]
    for query in queries:
        with pytest.raises(StreamingQueryException, match="dies after the Delta commit of batch 1"):
            query.awaitTermination()
    monkeypatch.undo()

    # Restart from the checkpoints: Spark runs batch 1 again with the same offsets and batch id.
    harness.run(crashing, topic, interrupted)
    for projection in crashing:
        assert harness.rows(projection, interrupted) == harness.rows(projection, reference), projection.name
        versions = txn_versions(interrupted.table(projection.name))
        assert 1 in {v for _, v in versions}, f"{projection.name}: batch 1 was not written before the crash"
        repeated = [tv for tv, n in Counter(versions).items() if n > 1]
        assert not repeated, f"{projection.name}: batches applied twice to the table: {repeated}"


def test_query_stopped_mid_run_then_resumed_matches_uninterrupted_run(harness: Harness) -> None:
    topic = harness.topic(order_lifecycle(8))
    reference, stopped = harness.lake("reference"), harness.lake("stopped")
    stopping = (orders_current, orders_history)
    harness.run(stopping, topic, reference)

    settings = harness.settings(stopped, available_now=False, trigger_interval_s=0.5, max_offsets_per_trigger=4)
    queries = [runner.start(harness.spark, on_topic(p, topic), settings) for p in stopping]
    deadline = time.monotonic() + 300
    while any((q.lastProgress or {}).get("batchId", -1) < 1 for q in queries):
        assert time.monotonic() < deadline, "two batches did not complete in time"
        time.sleep(0.2)
    for query in queries:
        query.stop()  # may interrupt a batch half way
    assert _applied_offsets(stopped, orders_current.name) < 21, "the stop came after everything was applied"

    harness.run(stopping, topic, stopped)
    for projection in stopping:
        assert harness.rows(projection, stopped) == harness.rows(projection, reference), projection.name


def _applied_offsets(lake: Lake, name: str) -> int:
    progress = json.loads(Path(lake.progress(name)).read_text())
    return sum(sum(parts.values()) for parts in progress["offsets"].values())
