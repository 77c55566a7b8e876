"""The fold's event store within the dedup horizon: kept events behind it compacted into one base per key."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from projections import DedupHorizon, Event, Fold, Projection, State
from projections.applier import BatchApplier
from projections.examples import ORDER_EVENTS
from projections.lake import Lake
from projections.progress import read_progress
from projections.runner import prepare
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import BASE_TIME, OutboxEvent, as_micro_batch

pytestmark = pytest.mark.integration


def trail(state: State | None, event: Event) -> State | None:
    """An order-sensitive fold: the seqs in the order they were folded; a cancellation deletes the key."""
    if event.event_type == "OrderCancelled":
        return None
    before = (state or {}).get("trail")
    return {"trail": f"{before},{event.seq}" if before else str(event.seq)}


def trail_fold(horizon: DedupHorizon) -> Projection:
    return Projection(
        name="order_trail",
        kind=Fold(function=trail, state="trail STRING", horizon=horizon),
        event_types=ORDER_EVENTS,
        aggregate_types=("order",),
        key="order_id",
    )


def paid(seq: int, order: str, minute: int = 0) -> OutboxEvent:
    return OutboxEvent(
        seq,
        order,
        "OrderPaid",
        {"order_id": order, "amount": 10},
        event_id=f"evt-{seq:05d}",
        occurred_at=BASE_TIME + timedelta(minutes=minute),
    )


def cancelled(seq: int, order: str, minute: int = 0) -> OutboxEvent:
    return OutboxEvent(
        seq,
        order,
        "OrderCancelled",
        {"order_id": order, "reason": "customer"},
        event_id=f"evt-{seq:05d}",
        occurred_at=BASE_TIME + timedelta(minutes=minute),
    )


def folded_in_seq_order(events: list[OutboxEvent]) -> dict[str, tuple[str | None, int, bool]]:
    """Per order: (trail, seq, is_deleted) as folding its distinct events in seq order gives them."""
    states: dict[str, tuple[State | None, int]] = {}
    for e in sorted({e.seq: e for e in events}.values(), key=lambda e: e.seq):
        before = states.get(e.aggregate_id, (None, 0))[0]
        event = Event(e.event_id, e.event_type, "order", e.aggregate_id, e.aggregate_id, e.seq, BASE_TIME, {})
        states[e.aggregate_id] = (trail(before, event), e.seq)
    return {k: (None if s is None else s["trail"], seq, s is None) for k, (s, seq) in states.items()}


class Folding:
    """One trail fold applied batch by batch, as Spark would hand them over, and its tables read back."""

    def __init__(self, harness: Harness, horizon: DedupHorizon, lake: Lake | None = None) -> None:
        self.harness, self.projection = harness, trail_fold(horizon)
        self.lake = lake or harness.lake("lake")
        self.applier = self.restarted()

    def restarted(self) -> BatchApplier:
        """A new applier, as after a restart: it reads the progress record again."""
        payload = prepare(self.harness.spark, self.projection, self.lake)
        return BatchApplier(self.projection, payload, self.lake, app_id="fold-horizon")

    def apply(self, batch_id: int, events: list[OutboxEvent]) -> None:
        self.applier.apply(as_micro_batch(self.harness.spark, events), batch_id)

    def table(self) -> dict[str, tuple[str | None, int, bool]]:
        rows = self.harness.spark.read.format("delta").load(self.lake.table(self.projection.name)).collect()
        return {r["order_id"]: (r["trail"], r["seq"], r["is_deleted"]) for r in rows}

    def store(self) -> list[tuple[str, int, str | None]]:
        """The event store's rows: (order, seq, "event") for a kept event, (order, seq, base state) for a base."""
        frame = self.harness.spark.read.format("delta").load(self.lake.staging(self.projection.name))
        return sorted(
            (r["order_id"], r["seq"], _base(r) if r["_base"] else "event")
            for r in frame.select("order_id", "seq", "_base", "_base_state").collect()
        )

    def progress(self) -> Any:
        progress = read_progress(self.lake, self.projection.name)
        assert progress is not None
        return progress


def _base(row: Any) -> str:
    return "base:None" if row["_base_state"] is None else f"base:{row['_base_state']['trail']}"


SEQS = DedupHorizon(seqs=3, prune_every=1)


def test_the_event_store_keeps_the_events_inside_the_horizon_and_one_base_per_key(harness: Harness) -> None:
    fold = Folding(harness, SEQS)
    sent: list[OutboxEvent] = []
    sizes = []
    # Batch b holds seqs 3b+1..3b+3, one each for A, B, C; B is cancelled at seq 5 and paid again after.
    for b in range(4):
        batch = [(cancelled if s == 5 else paid)(s, "ABC"[(s - 1) % 3]) for s in range(3 * b + 1, 3 * b + 4)]
        sent += batch
        fold.apply(b, batch)
        sizes.append(len(fold.store()))

    # Pruned after each batch under the floor it applied with (the highest seq before it, less 3): the store
    # never holds more than the 7 seqs from that floor to the batch's last, plus a base for each of 3 keys.
    # The last prune (floor 6) compacted A's and B's bases of the one before (floor 3) with their next event.
    assert max(sizes) <= 7 + 3 < len(sent)
    assert fold.store() == sorted(
        [
            ("A", 4, "base:1,4"),
            ("B", 5, "base:None"),  # B's state after its cancellation: deleted
            ("C", 3, "base:3"),
            *[("ABC"[(s - 1) % 3], s, "event") for s in range(6, 13)],
        ]
    )
    table = fold.table()
    assert table == folded_in_seq_order(sent)
    assert table == {
        "A": ("1,4,7,10", 10, False),
        "B": ("8,11", 11, False),
        "C": ("3,6,9,12", 12, False),
    }


# A six-seq horizon. Batch 1 runs under the floor 10 - 6 = 4 and its prune compacts A's seqs 1 and 2 and
# B's 3 into bases; batch 2 then brings a late event for each, inside the horizon (floor 11 - 6 = 5).
LATE = [
    [paid(1, "A"), paid(2, "A"), cancelled(3, "B"), paid(8, "A"), paid(9, "B"), paid(10, "C")],
    [paid(11, "C")],
    [paid(5, "A"), paid(6, "B")],
]
COMPACTED = [
    ("A", 2, "base:1,2"),
    ("A", 8, "event"),
    ("B", 3, "base:None"),
    ("B", 9, "event"),
    ("C", 10, "event"),
    ("C", 11, "event"),
]


def test_a_late_event_inside_the_horizon_is_folded_again_from_its_keys_base(harness: Harness) -> None:
    fold = Folding(harness, DedupHorizon(seqs=6, prune_every=1))
    fold.apply(0, LATE[0])
    fold.apply(1, LATE[1])
    assert fold.store() == COMPACTED

    fold.apply(2, LATE[2])  # older than A's 8 and B's 9, newer than their bases
    table = fold.table()
    assert table == folded_in_seq_order([e for batch in LATE for e in batch])
    assert table == {"A": ("1,2,5,8", 8, False), "B": ("6,9", 9, False), "C": ("10,11", 11, False)}
    assert fold.progress().events_beyond_horizon == 0


def test_an_event_behind_a_seq_horizon_is_refused_and_counted(harness: Harness) -> None:
    fold = Folding(harness, SEQS)
    fold.apply(0, [paid(1, "A"), paid(2, "A"), paid(10, "A"), paid(11, "B")])
    before = fold.table()

    fold.apply(1, [paid(3, "A"), paid(4, "B")])  # floor 11 - 3 = 8
    assert fold.table() == before == {"A": ("1,2,10", 10, False), "B": ("11", 11, False)}
    progress = fold.progress()
    assert (progress.last_batch["beyond_horizon"], progress.last_batch["applied"]) == (2, 0)
    assert progress.events_beyond_horizon == 2


def test_a_time_horizon_refuses_an_event_at_or_below_its_keys_base_and_folds_the_rest(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    fold = Folding(harness, DedupHorizon(time=timedelta(minutes=10), prune_every=1))
    # C's seq 8 is older in event time than its seq 7: C's seq-prefix behind the floor is empty.
    fold.apply(
        0, [paid(1, "A", minute=0), paid(3, "A", minute=1), paid(7, "C", minute=25), paid(8, "C", minute=2)]
    )
    fold.apply(1, [paid(4, "B", minute=30)])  # pruned under the floor minute 25 - 10 = 15
    assert fold.store() == [
        ("A", 3, "base:1,3"),
        ("B", 4, "event"),
        ("C", 7, "event"),
        ("C", 8, "event"),
    ]

    # Floor: minute 20. All three are inside it; A's seq 2 is below A's base (seq 3), so it cannot be
    # folded in seq order any more; C's seq 6 is folded again with all of C's kept events.
    with caplog.at_level(logging.WARNING, logger="projections.kinds.fold"):
        fold.apply(2, [paid(2, "A", minute=29), paid(6, "C", minute=28), paid(9, "B", minute=32)])
    assert fold.table() == {
        "A": ("1,3", 3, False),
        "B": ("4,9", 9, False),
        "C": ("6,7,8", 8, False),
    }
    progress = fold.progress()
    assert (progress.last_batch["beyond_horizon"], progress.last_batch["applied"]) == (1, 2)
    assert progress.events_beyond_horizon == 1
    assert ("A", 2, "event") not in fold.store()
    refusals = [r for r in caplog.records if "base" in r.getMessage()]
    assert len(refusals) == 1 and getattr(refusals[0], "count", None) == 1
    assert [s["seq"] for s in getattr(refusals[0], "sample", [])] == [2]


class Crash(RuntimeError):
    """Stands for the driver dying in the middle of a batch."""


def test_a_crash_between_the_prunes_commit_and_the_progress_record_ends_as_if_uninterrupted(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import projections.applier.batch_function

    fold = Folding(harness, DedupHorizon(seqs=6, prune_every=1))
    fold.apply(0, LATE[0])

    def crash(*args: Any) -> None:
        raise Crash("dies after the prune's commit, before the progress record")

    monkeypatch.setattr(projections.applier.batch_function, "write_progress", crash)
    with pytest.raises(Crash):
        fold.apply(1, LATE[1])
    monkeypatch.undo()
    assert fold.store() == COMPACTED
    assert fold.progress().batch_id == 0

    fold.applier = fold.restarted()
    fold.apply(1, LATE[1])  # Spark runs the batch again: its writes are skipped, its prune finds nothing to do
    assert fold.store() == COMPACTED
    assert fold.table() == {"A": ("1,2,8", 8, False), "B": ("9", 9, False), "C": ("10,11", 11, False)}
    progress = fold.progress()
    assert (progress.batch_id, progress.last_batch["applied"], progress.events_beyond_horizon) == (1, 1, 0)


def test_an_event_store_without_base_columns_is_given_them_and_folds_on(harness: Harness) -> None:
    fold = Folding(harness, DedupHorizon(seqs=4, prune_every=1))
    fold.apply(0, [paid(1, "A"), paid(2, "A"), paid(3, "B"), paid(6, "A"), paid(7, "B")])
    # The store as folds wrote it before bases: the same events, without the two base columns.
    spark, store = harness.spark, fold.lake.staging(fold.projection.name)
    events_only = spark.read.format("delta").load(store).drop("_base", "_base_state")
    before_bases = spark.createDataFrame(events_only.collect(), events_only.schema)
    before_bases.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(store)
    assert "_base" not in spark.read.format("delta").load(store).columns

    fold.applier = fold.restarted()  # prepare adds the columns
    assert {"_base", "_base_state"} <= set(spark.read.format("delta").load(store).columns)
    fold.apply(1, [paid(4, "A")])  # floor 7 - 4 = 3: A folded again over the old rows; 1 and 2 compacted
    assert fold.store() == [
        ("A", 2, "base:1,2"),
        ("A", 4, "event"),
        ("A", 6, "event"),
        ("B", 3, "event"),
        ("B", 7, "event"),
    ]
    assert fold.table() == {"A": ("1,2,4,6", 6, False), "B": ("3,7", 7, False)}
