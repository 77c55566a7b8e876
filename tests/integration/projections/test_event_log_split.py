"""`event_log` applies a streamed micro-batch from a low seq guessed before the batch is read (where the batch
before began): its MERGE of the events from there up is the one pass over the batch, counted by the stream's
observation; only events below the guess (held back by a lagging partition, re-sent, replayed) go through a
second MERGE, under a `Txn` of its own.

Whatever the guess, the tables, the quarantine and the progress record (refusals behind the horizon
included) must be those the two-pass path leaves on the same batches, and a batch that Spark runs again
after its first write landed must come out the same as one that never failed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from projections import runner
from projections.applier import BELOW_GUESS_TXN
from projections.declaration import Projection
from projections.examples import order_events
from projections.horizon import DedupHorizon
from projections.kinds import EventLog
from projections.lake import Lake, read_text
from tests.integration.projections.conftest import Harness, delta_log, on_topic, table_rows
from tests.integration.projections.events import OutboxEvent, order_lifecycle, produce

BAD = [
    OutboxEvent(301, "order-y1", "OrderPlaced", "{not json"),
    OutboxEvent(302, "order-y2", "OrderPaid", {"order_id": "order-y2", "amount": 1}, header_overrides={"seq": "2x"}),
]


def _applied_by(caplog: pytest.LogCaptureFixture, run: Callable[[], None]) -> list[Any]:
    """The "batch applied" log records of the batches `run` applies (and no earlier ones: an earlier test may
    have left the applier's logger at INFO, so they are captured outside `at_level` too)."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="projections.applier"):
        run()
    return [r for r in caplog.records if r.getMessage() == "batch applied"]


def _progress(lake: Lake, name: str) -> dict[str, Any]:
    text = read_text(lake.progress(name))
    assert text, "no progress record"
    record: dict[str, Any] = json.loads(text)
    return {k: record[k] for k in ("offsets", "max_seq", "last_event_time", "last_batch", "events_beyond_horizon")}


def _quarantine(harness: Harness, lake: Lake, name: str) -> list[str]:
    return table_rows(harness.spark, lake.quarantine(name), drop=("quarantined_at", "batch_id"))


def _rounds() -> tuple[list[OutboxEvent], list[OutboxEvent], list[OutboxEvent]]:
    """Two rounds of records, and the events held back from the first. The second round holds new events; the
    held-back ones, as a lagging partition would deliver them (never applied: two below where the first round
    began, so below the guess, and two above it); copies of first-round events (the first, and the highest);
    a copy of its own new event; bad records."""
    lifecycle = order_lifecycle(6)
    held = [lifecycle[0], lifecycle[1], lifecycle[-3], lifecycle[-5]]
    first = [e for e in lifecycle if e not in held]
    later = order_lifecycle(4, start_seq=lifecycle[-1].seq + 1)
    later = [dataclasses.replace(e, aggregate_id=f"late-{e.aggregate_id}") for e in later]
    return first, [*later[:3], *held, first[0], *BAD, later[1], first[-1], *later[3:]], held


def _two_pass(projection: Projection) -> Projection:
    """The same projection applied by the two-pass path: a kind that needs the batch's seq range first."""

    @dataclasses.dataclass(frozen=True)
    class MergingEventLog(EventLog):
        range_only_prunes = False

    assert isinstance(projection.kind, EventLog)
    return dataclasses.replace(projection, kind=MergingEventLog(horizon=projection.kind.horizon))


@pytest.mark.parametrize(
    "horizon",
    [EventLog().horizon, DedupHorizon(seqs=8)],
    ids=["default-horizon", "8-seq-horizon-refuses-old-copies"],
)
def test_split_batches_leave_what_the_two_pass_path_leaves(
    harness: Harness, caplog: pytest.LogCaptureFixture, horizon: DedupHorizon
) -> None:
    first, second, held = _rounds()
    topic = harness.new_topic("proj", partitions=2)
    projection = on_topic(dataclasses.replace(order_events, kind=EventLog(horizon=horizon)), topic)
    split, merged = harness.lake("split"), harness.lake("merged")

    produce(harness.bootstrap, topic, first)
    [one] = _applied_by(caplog, lambda: harness.run([projection], topic, split))
    harness.run([_two_pass(projection)], topic, merged)
    produce(harness.bootstrap, topic, second)
    [two] = _applied_by(caplog, lambda: harness.run([projection], topic, split))
    harness.run([_two_pass(projection)], topic, merged)

    # The first round: one pass (the MERGE reads and counts the batch), nothing below the guess.
    assert "read_decode_merge" in one.phases and "merge_below_guess" not in one.phases, one.phases
    assert "read_decode_stats" not in one.phases, one.phases
    # The second holds events below where the first began: a second MERGE for those.
    assert "read_decode_merge" in two.phases and "merge_below_guess" in two.phases, two.phases
    assert "read_decode_stats" not in two.phases, two.phases
    assert (two.rows, two.quarantined) == (len(second), len(BAD))

    rows = harness.rows(projection, split)
    assert rows == harness.rows(projection, merged)
    assert _quarantine(harness, split, projection.name) == _quarantine(harness, merged, projection.name)
    assert _progress(split, projection.name) == _progress(merged, projection.name)
    if horizon.seqs is None:
        assert len(rows) == len({e.event_id for e in [*first, *second]}) - len(BAD)
        assert all(any(e.event_id in row for row in rows) for e in held), "every held-back event was applied"
    else:
        # Behind the floor (the highest seq applied, less 8): the two held-back events below the guess and the
        # copy of the first round's first event. Refused on both paths; the other held-back ones are applied.
        assert _progress(split, projection.name)["events_beyond_horizon"] == 3
        assert all(any(e.event_id in row for row in rows) for e in held[2:])


class Crash(RuntimeError):
    """Stands for the driver dying after a batch's first MERGE, before the one below the guess."""


def test_a_batch_run_again_after_its_first_merge_landed_leaves_what_an_unbroken_run_leaves(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    first, second, held = _rounds()
    topic = harness.new_topic("proj", partitions=1)
    projection = on_topic(order_events, topic)
    reference, crashed = harness.lake("reference"), harness.lake("crashed")
    produce(harness.bootstrap, topic, first)
    harness.run([projection], topic, reference)
    harness.run([projection], topic, crashed)
    produce(harness.bootstrap, topic, second)
    harness.run([projection], topic, reference)

    merge = EventLog.apply

    def crash_below_guess(self: EventLog, batch: Any) -> int:
        if batch.txn.app_id.endswith(BELOW_GUESS_TXN):
            raise Crash("dies after the first MERGE of batch 1, before the one below the guess")
        return merge(self, batch)

    monkeypatch.setattr(EventLog, "apply", crash_below_guess)
    query = runner.start(harness.spark, projection, harness.settings(crashed))
    with pytest.raises(StreamingQueryException, match="dies after the first MERGE of batch 1"):
        query.awaitTermination()
    monkeypatch.setattr(EventLog, "apply", merge)

    # Spark runs batch 1 again: its first MERGE landed, so its `Txn` skips it and nothing is read or counted
    # there; the batch is counted in a job of its own, and the events below the guess are MERGEd.
    [retried] = _applied_by(caplog, lambda: harness.run([projection], topic, crashed))
    assert retried.batch_id == 1
    assert "read_decode_stats" in retried.phases and "merge_below_guess" in retried.phases, retried.phases
    assert (retried.rows, retried.quarantined) == (len(second), len(BAD))

    assert harness.rows(projection, crashed) == harness.rows(projection, reference)
    rows = harness.rows(projection, crashed)
    assert len(rows) == len({e.event_id for e in [*first, *second]}) - len(BAD)
    assert all(any(e.event_id in row for row in rows) for e in held), "the held-back events were MERGEd"
    assert _quarantine(harness, crashed, projection.name) == _quarantine(harness, reference, projection.name)
    progress, expected = _progress(crashed, projection.name), _progress(reference, projection.name)
    assert {k: progress[k] for k in ("offsets", "max_seq", "last_event_time")} == {
        k: expected[k] for k in ("offsets", "max_seq", "last_event_time")
    }


def test_the_two_writes_of_a_batch_carry_transaction_ids_of_their_own(harness: Harness) -> None:
    first, second, _ = _rounds()
    topic = harness.new_topic("proj", partitions=1)
    projection = on_topic(order_events, topic)
    lake = harness.lake("split")
    produce(harness.bootstrap, topic, first)
    harness.run([projection], topic, lake)
    produce(harness.bootstrap, topic, second)
    harness.run([projection], topic, lake)
    txns = [action["txn"] for _, action in delta_log(lake.table(projection.name)) if "txn" in action]
    # Batch 0 MERGEs once; batch 1 twice (from the guess up, and below it), each write under its own app id, so
    # neither skips the other (Delta skips a write whose app id has reached its version).
    marks = sorted((t["appId"].endswith(BELOW_GUESS_TXN), t["version"]) for t in txns)
    assert marks == [(False, 0), (False, 1), (True, 1)], txns
    assert len({t["appId"].removesuffix(BELOW_GUESS_TXN) for t in txns}) == 1
