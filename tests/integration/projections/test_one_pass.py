"""`latest_state` applies a streamed micro-batch in one pass: its MERGE reads and decodes the batch and Spark's
streaming observation counts it as it goes (`projections.observed`). It must leave what the two-pass path
leaves (the table, the quarantine, the progress record), count a batch once even though the quarantine reads
it again, and count a batch that Spark runs again after its MERGE landed (the MERGE is then skipped)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from projections import runner
from projections.applier import BatchApplier
from projections.examples import orders_current
from projections.lake import Lake, read_text
from tests.integration.projections.conftest import Harness, on_topic, table_rows
from tests.integration.projections.events import OutboxEvent, order_lifecycle, produce

BAD = [
    OutboxEvent(201, "order-y1", "OrderPlaced", "{not json"),
    OutboxEvent(202, "order-y2", "OrderPaid", {"order_id": "order-y2", "amount": 1}, header_overrides={"seq": "2x"}),
]
IGNORED = [OutboxEvent(203, "order-000", "OrderRefunded", {"order_id": "order-000"})]  # a type it does not handle


def _applied(caplog: pytest.LogCaptureFixture) -> list[Any]:
    return [r for r in caplog.records if r.getMessage() == "batch applied"]


def _progress(lake: Lake) -> dict[str, Any]:
    text = read_text(lake.progress(orders_current.name))
    assert text, "no progress record"
    record: dict[str, Any] = json.loads(text)
    return {k: record[k] for k in ("offsets", "max_seq", "last_event_time", "last_batch")}


def _quarantine(harness: Harness, lake: Lake) -> list[str]:
    return table_rows(harness.spark, lake.quarantine(orders_current.name), drop=("quarantined_at", "batch_id"))


def test_a_one_pass_batch_leaves_the_table_quarantine_and_progress_of_the_two_pass_path(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    good = order_lifecycle(6)
    topic = harness.new_topic("proj", partitions=2)
    produce(harness.bootstrap, topic, [*good[:7], *BAD, *IGNORED, *good[7:]])
    projection = on_topic(orders_current, topic)

    one = harness.lake("one_pass")
    with caplog.at_level(logging.INFO, logger="projections.applier"):
        harness.run([orders_current], topic, one)
    [streamed] = _applied(caplog)  # one batch: the whole topic
    assert "read_decode_apply" in streamed.phases and "read_decode_stats" not in streamed.phases, streamed.phases
    # Counted once, although the quarantine read the batch a second time after the MERGE.
    assert (streamed.rows, streamed.applied, streamed.quarantined, streamed.ignored) == (
        len(good) + len(BAD) + len(IGNORED), len(good), len(BAD), len(IGNORED)
    )

    # The two-pass path: the same records as one static batch.
    two = harness.lake("two_pass")
    applier = BatchApplier(projection, runner.prepare(harness.spark, projection, two), two, "two-pass")
    stats = applier.apply(harness.kafka_batch(topic), 0)
    assert "read_decode_stats" in applier.phases
    assert (stats.rows, stats.applied, stats.quarantined, stats.ignored) == (
        streamed.rows, streamed.applied, streamed.quarantined, streamed.ignored
    )

    assert harness.rows(orders_current, one) == harness.rows(orders_current, two)
    assert len(_quarantine(harness, one)) == len(BAD)
    assert _quarantine(harness, one) == _quarantine(harness, two)
    assert _progress(one) == _progress(two)


class Crash(RuntimeError):
    """Stands for the driver dying after the batch's MERGE and quarantine, before its progress record."""


def test_a_batch_run_again_after_its_merge_landed_is_counted_from_the_batch(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    good = order_lifecycle(4)
    topic = harness.new_topic("proj", partitions=1)
    produce(harness.bootstrap, topic, [*good[:6], *BAD, *good[6:]])
    reference, crashed = harness.lake("reference"), harness.lake("crashed")
    harness.run([orders_current], topic, reference)

    record = BatchApplier.record

    def record_or_crash(self: BatchApplier, session: Any, batch_id: int, stats: Any) -> None:
        if batch_id == 1:
            raise Crash("dies after the MERGE of batch 1")
        record(self, session, batch_id, stats)

    monkeypatch.setattr(BatchApplier, "record", record_or_crash)
    per_batch = 5
    query = runner.start(
        harness.spark,
        on_topic(orders_current, topic),
        harness.settings(crashed, max_offsets_per_trigger=per_batch),
    )
    with pytest.raises(StreamingQueryException, match="dies after the MERGE of batch 1"):
        query.awaitTermination()
    monkeypatch.undo()

    # Spark runs batch 1 again with the same offsets: the MERGE is skipped by its Txn and reads nothing, so the
    # applier counts the batch in a job of its own.
    with caplog.at_level(logging.INFO, logger="projections.applier"):
        harness.run([orders_current], topic, crashed, max_offsets_per_trigger=per_batch)
    retried = next(r for r in _applied(caplog) if r.batch_id == 1)
    assert "read_decode_stats" in retried.phases, retried.phases
    # Batch 1 is offsets 5 to 9: good[5], the two bad records, good[6] and good[7].
    assert (retried.rows, retried.applied, retried.quarantined) == (per_batch, 3, 2)
    later = [r for r in _applied(caplog) if r.batch_id > 1]
    assert later and all("read_decode_apply" in r.phases for r in later)

    assert harness.rows(orders_current, crashed) == harness.rows(orders_current, reference)
    assert _quarantine(harness, crashed) == _quarantine(harness, reference)
    progress, expected = _progress(crashed), _progress(reference)
    assert {k: progress[k] for k in ("offsets", "max_seq", "last_event_time")} == {
        k: expected[k] for k in ("offsets", "max_seq", "last_event_time")
    }
