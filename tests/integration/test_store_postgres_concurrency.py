"""Many PostgreSQL writers committing out of seq order, and one reader using the snapshot horizon.

8 writer threads run 200 transactions each (1-3 events, by the writer API or plain SQL), roll back
about 15% of them, and hold a few open for one to two seconds while later ones commit. The reader
must see every committed event exactly once, in seq order, and never a rolled-back one.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine, create_engine, select, text

from bridge import migrate
from bridge.schema import domain_events
from bridge.store import OutboxRow, postgres
from bridge.writer import OutboxEvent, append
from tests.support import Tail

pytestmark = pytest.mark.integration

WRITERS = 8
TRANSACTIONS = 200
ROLLBACK_RATE = 0.15
HOLD_RATE = 0.02
CATCH_UP_SECONDS = 60.0
SEED = 20240601

PLAIN_INSERT = text(
    "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
    "VALUES (:event_id, 'order', :aggregate_id, 'OrderChanged', :payload)"
)


@dataclass
class Outcome:
    """What the writers did, collected under a lock: event ids and seqs, committed or rolled back."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    committed_ids: set[str] = field(default_factory=set)
    committed_seqs: set[int] = field(default_factory=set)
    rolled_back_ids: set[str] = field(default_factory=set)
    rolled_back_seqs: set[int] = field(default_factory=set)
    held: int = 0
    errors: list[BaseException] = field(default_factory=list)


@pytest.fixture()
def engine(postgres_url: str) -> Iterator[Engine]:
    migrate.upgrade(postgres_url)
    engine = create_engine(postgres_url, pool_size=WRITERS + 2, max_overflow=4)
    yield engine
    engine.dispose()


def write(engine: Engine, worker: int, outcome: Outcome) -> None:
    rng = random.Random(SEED + worker)
    try:
        for number in range(TRANSACTIONS):
            ids = [f"w{worker}-t{number}-e{index}" for index in range(rng.randint(1, 3))]
            aggregate_id = f"agg-{worker}-{number % 7}"
            with engine.connect() as conn:
                conn.begin()
                if rng.random() < 0.5:
                    events = [
                        OutboxEvent(
                            event_id=event_id,
                            aggregate_type="order",
                            aggregate_id=aggregate_id,
                            event_type="OrderChanged",
                            payload={"worker": worker, "n": number},
                        )
                        for event_id in ids
                    ]
                    append(conn, events)
                else:
                    for event_id in ids:
                        params = {"event_id": event_id, "aggregate_id": aggregate_id, "payload": '{"plain":true}'}
                        conn.execute(PLAIN_INSERT, params)
                seqs = set(conn.execute(select(domain_events.c.seq).where(domain_events.c.event_id.in_(ids))).scalars())
                hold = rng.random() < HOLD_RATE
                if hold:
                    time.sleep(rng.uniform(1.0, 2.0))  # later transactions commit meanwhile
                elif rng.random() < 0.3:
                    time.sleep(rng.uniform(0, 0.004))
                commit = rng.random() >= ROLLBACK_RATE
                if commit:
                    conn.commit()
                else:
                    conn.rollback()
            with outcome.lock:
                outcome.held += hold
                if commit:
                    outcome.committed_ids.update(ids)
                    outcome.committed_seqs.update(seqs)
                else:
                    outcome.rolled_back_ids.update(ids)
                    outcome.rolled_back_seqs.update(seqs)
    except BaseException as exc:
        with outcome.lock:
            outcome.errors.append(exc)
        raise


@pytest.mark.timeout(180)
def test_the_horizon_reader_sees_every_committed_event_once_in_order_and_no_rolled_back_one(
    engine: Engine,
) -> None:
    outcome = Outcome()
    writers = [threading.Thread(target=write, args=(engine, worker, outcome)) for worker in range(WRITERS)]
    for thread in writers:
        thread.start()

    tracker = Tail(postgres.PostgresReader(engine))
    delivered: list[OutboxRow] = []
    settled: set[int] = set()
    seen_pending: set[int] = set()
    deadline: float | None = None
    while True:
        step = tracker.poll(limit=500)
        delivered.extend(step.rows)
        for hole in step.settled:
            settled.update(range(hole.first, hole.last + 1))
        for hole in tracker.reader.pending:
            seen_pending.update(range(hole.first, hole.last + 1))
        if all(not thread.is_alive() for thread in writers):
            deadline = deadline or time.monotonic() + CATCH_UP_SECONDS
            caught_up = {row.event_id for row in delivered} >= outcome.committed_ids
            passed_everything = not tracker.reader.pending and tracker.cursor >= max(outcome.committed_seqs)
            if caught_up or passed_everything or time.monotonic() > deadline:
                break
        if not step.rows:
            time.sleep(0.01)

    assert not outcome.errors, f"a writer failed: {outcome.errors[0]!r}"
    seqs = [row.seq for row in delivered]
    ids = [row.event_id for row in delivered]
    if set(ids) < outcome.committed_ids:
        with engine.connect() as conn:
            holders = postgres.horizon_holders(conn)
        pytest.fail(
            f"{len(outcome.committed_ids - set(ids))} committed events were not delivered (lost, or still "
            f"waiting after {CATCH_UP_SECONDS}s); pending holes {tracker.reader.pending[:3]}, horizon holders {holders}"
        )
    assert seqs == sorted(seqs), "delivered out of seq order"
    assert len(set(seqs)) == len(seqs) and len(set(ids)) == len(ids), "delivered an event twice"
    assert set(ids) == outcome.committed_ids, "delivered something that was never committed"
    assert not set(ids) & outcome.rolled_back_ids, "delivered a rolled-back event"
    assert set(seqs) == outcome.committed_seqs
    assert not settled & outcome.committed_seqs, "settled a committed seq as a hole"
    assert settled == {seq for seq in outcome.rolled_back_seqs if seq < max(seqs)}
    # The run did exercise out-of-order commits: some seq was missing while a later one was visible,
    # and was delivered once its transaction committed. A plain `seq > last` reader would have lost it.
    assert seen_pending & outcome.committed_seqs, "no late commit happened; the test proved nothing"
    assert outcome.held > 0 and outcome.rolled_back_ids
