"""Never skip, searched: generated interleavings of writers and the bridge's reads over a model of each
dialect's visibility rules (`never_skip_model`), with a connection cut at every step of a read.

The real pieces run on top of the model: each dialect's `read_visible`, the `TailReader`, the hole
rule and the ack tracker, driven as the daemon drives them (read after the tracker's position,
settle exactly the reported holes, track the rows). After every step: nothing delivered twice or out
of seq order, no rolled-back seq delivered, no seq settled as a hole that is committed or may still
commit, and the watermark only covers seqs that were acknowledged or settled. At the end, once every
writer has finished and the reader has caught up: every committed seq was delivered, in order.

The search has teeth: the same harness finds the known ways to lose events when they are put back
(a reader that moves its own cursor before the connection is released, with a daemon that settles
seq jumps itself; a SQL Server writer that draws its IDENTITY before it holds a rowversion; a
PostgreSQL writer that draws its seq before its xid).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.core.holes import SeqRange
from bridge.core.watermark import AckTracker
from bridge.errors import TransientStoreError
from bridge.store.reader import Batch, TailReader, VisibleRows
from tests.unit.bridge.core.never_skip_model import FAULT_POINTS, MODELS, Model, MssqlModel, PostgresModel

pytestmark = pytest.mark.unit

Choose = Callable[[Sequence[Any]], Any]


class Lost(AssertionError):
    """A committed event was skipped (settled as a hole, or never delivered)."""


@dataclass
class Bridge:
    """The daemon's reading and accounting, on a reader and an ack tracker; acks come when chosen."""

    reader: Any
    tracker: AckTracker = field(default_factory=lambda: AckTracker(0))
    delivered: list[int] = field(default_factory=list)
    settled: set[int] = field(default_factory=set)
    unacked: list[int] = field(default_factory=list)
    acked: set[int] = field(default_factory=set)
    failed_reads: int = 0

    def read(self, limit: int) -> None:
        try:
            batch = self.reader.poll(self.tracker.position, limit)
        except TransientStoreError:
            self.failed_reads += 1  # the daemon backs off and reads again from the same position
            return
        self.account(batch)

    def account(self, batch: Batch) -> None:
        for item in batch.in_order():
            if isinstance(item, SeqRange):
                self.tracker.settle(item)
                self.settled.update(range(item.first, item.last + 1))
            else:
                self.tracker.track(item.seq, 1)
                self.delivered.append(item.seq)
                self.unacked.append(item.seq)

    def ack(self, index: int) -> None:
        seq = self.unacked.pop(index % len(self.unacked))
        self.tracker.ack(seq)
        self.acked.add(seq)


def check(model: Model, bridge: Bridge) -> None:
    delivered = bridge.delivered
    assert all(a < b for a, b in itertools.pairwise(delivered)), f"out of order or twice: {delivered}"
    assert not set(delivered) & model.aborted, "delivered a rolled-back seq"
    doomed = bridge.settled & (set(model.committed) | model.in_progress_seqs())
    if doomed:
        raise Lost(f"seqs {sorted(doomed)} settled as holes, but they are committed or may still commit")
    covered = bridge.acked | bridge.settled
    watermark = bridge.tracker.watermark
    assert all(seq in covered for seq in range(1, watermark + 1)), (
        f"watermark {watermark} is above a seq neither acknowledged nor settled"
    )


def run(model: Model, choose: Choose, steps: int, limit: int, faults: bool,
        bridge: Bridge | None = None) -> Bridge:
    """Writers and reads interleaved as `choose` decides; then every writer ends and the bridge catches up."""
    bridge = bridge or Bridge(model.reader())
    for _ in range(steps):
        actions: list[Any] = ["begin", "read", "read"]
        if bridge.unacked:
            actions.append("ack")
        actions.extend((name, step) for name, txn in sorted(model.running.items())
                       for step in model.writer_steps(txn))
        action = choose(actions)
        if action == "begin":
            txn = model.begin()
            if txn is not None:
                model.write(txn)
        elif action == "read":
            model.faults.plan = choose(FAULT_POINTS) if faults else None
            bridge.read(limit)
        elif action == "ack":
            bridge.ack(choose(range(len(bridge.unacked))))
        else:
            name, step = action
            model.step(model.running[name], step)
        check(model, bridge)
    model.faults.plan = None
    while model.running:
        txn = model.running[min(model.running)]
        ends = [step for step in model.writer_steps(txn) if step != "write"]
        model.step(txn, choose(ends) if ends else "write")
    for _ in range(model.next_seq + 2):
        bridge.read(limit)
        while bridge.unacked:
            bridge.ack(0)
        check(model, bridge)
    committed = sorted(model.committed)
    if bridge.delivered != committed:
        raise Lost(f"delivered {bridge.delivered}, committed {committed}")
    assert bridge.tracker.watermark == (committed[-1] if committed else 0)
    return bridge


DIALECTS = sorted(MODELS)


@pytest.mark.parametrize("dialect", DIALECTS)
@settings(max_examples=150, deadline=None)
# Choices through a Random that Hypothesis drives and shrinks: the search of a st.sampled_from draw per
# choice, several times cheaper per example.
@given(rng=st.randoms(use_true_random=False), steps=st.integers(1, 60), limit=st.integers(1, 6))
def test_every_committed_event_is_published_once_in_seq_order_whatever_the_schedule_and_the_cuts(
    dialect: str, rng: random.Random, steps: int, limit: int
) -> None:
    run(MODELS[dialect](), rng.choice, steps, limit, faults=True)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_thousands_of_random_schedules_with_cuts_lose_nothing(dialect: str) -> None:
    # Breadth beside Hypothesis's shrinking: 1,500 schedules per dialect in a couple of seconds.
    cuts = 0
    for seed in range(1500):
        rng = random.Random(seed)
        model = MODELS[dialect]()
        bridge = run(model, rng.choice, steps=rng.randint(1, 80), limit=rng.randint(1, 8), faults=True)
        cuts += bridge.failed_reads
    assert cuts > 1000, "the faults did not strike: the search proves little"


def test_a_read_cut_at_its_closing_rollback_is_read_again_from_the_same_seq() -> None:
    model = PostgresModel()
    bridge = Bridge(model.reader())
    for _ in range(3):
        txn = model.begin()
        assert txn is not None
        model.write(txn)
        model.finish(txn, True)
    model.faults.plan = "release"
    bridge.read(10)
    assert model.faults.done == ["release"] and bridge.failed_reads == 1
    assert bridge.tracker.position == 0 and bridge.delivered == []
    bridge.read(10)
    assert bridge.delivered == [1, 2, 3] and bridge.settled == set()


# ---------------------------------------------------------------------------------- the search's teeth


class OwnCursorReader:
    """The old shape: the reader keeps its own cursor and moves it inside the connection block."""

    def __init__(self, reader: TailReader[Any], session: Callable[[], AbstractContextManager[Any]],
                 read_visible: Callable[[Any, int, int], VisibleRows]) -> None:
        self.rule = reader._rule
        self.session = session
        self.read_visible = read_visible
        self.cursor = 0

    def poll(self, after: int, limit: int) -> Batch:
        try:
            with self.session() as session:
                visible = self.read_visible(session, self.cursor, limit)
                step = self.rule.advance(self.cursor, (r.seq for r in visible.rows), visible.horizon)
                self.cursor = step.through  # moved before the connection is released
        except Exception as exc:
            raise TransientStoreError(str(exc)) from exc
        by_seq = {r.seq: r for r in visible.rows}
        return Batch(tuple(by_seq[s] for s in step.deliver), step.settled, step.waiting_on)


class JumpSettlingBridge(Bridge):
    """The old daemon: it works holes out from seq jumps itself instead of taking the reader's."""

    def account(self, batch: Batch) -> None:
        for row in batch.rows:
            if row.seq > self.tracker.position + 1:
                hole = SeqRange(self.tracker.position + 1, row.seq - 1)
                self.tracker.settle(hole)
                self.settled.update(range(hole.first, hole.last + 1))
            self.tracker.track(row.seq, 1)
            self.delivered.append(row.seq)
            self.unacked.append(row.seq)


def finds_a_loss(make: Callable[[], Model], bridge_for: Callable[[Model], Bridge], faults: bool,
                 seeds: int = 3000) -> bool:
    for seed in range(seeds):
        rng = random.Random(seed)
        model = make()
        try:
            run(model, rng.choice, steps=rng.randint(1, 80), limit=rng.randint(1, 8), faults=faults,
                bridge=bridge_for(model))
        except Lost:
            return True
    return False


@pytest.mark.parametrize("dialect", ["postgresql", "mssql"])
def test_the_search_finds_the_drop_at_the_end_of_a_read_of_the_old_shape(dialect: str) -> None:
    def old_bridge(model: Model) -> Bridge:
        reader = model.reader()
        return JumpSettlingBridge(OwnCursorReader(reader, reader._session, reader._read_visible))

    assert finds_a_loss(MODELS[dialect], old_bridge, faults=True)
    assert not finds_a_loss(MODELS[dialect], lambda model: Bridge(model.reader()), faults=True, seeds=300)


def test_the_search_finds_sql_servers_identity_drawn_before_the_rowversion() -> None:
    assert finds_a_loss(lambda: MssqlModel(identity_first=True), lambda model: Bridge(model.reader()),
                        faults=False)


def test_the_search_finds_a_postgresql_seq_drawn_before_the_xid() -> None:
    assert finds_a_loss(lambda: PostgresModel(seq_before_xid=True), lambda model: Bridge(model.reader()),
                        faults=False)
