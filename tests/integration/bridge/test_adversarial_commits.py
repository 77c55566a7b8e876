"""Adversarial commit orders with the daemon running, on every backend that is available (PostgreSQL; SQL
Server with READ_COMMITTED_SNAPSHOT on, since it changes what readers see): many concurrent writers,
random rollbacks (whole transactions and savepoints), transactions held open for 1-3 s while later ones
commit, and writers that serialise on an aggregate (a locking read of its lock row, then insert). Every
committed event is published exactly once, no rolled-back one is, every rolled-back seq is settled as a
hole, and each aggregate's events arrive in seq order. The dialects' SQL is in `tests.dialects`."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from bridge.migrate import upgrade
from tests.dialects import BACKENDS, database_url, writer_sql
from tests.support import (
    bridge_config,
    committed_seqs,
    keys_in_seq_order,
    read_topic,
    record_seq,
    start_bridge,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

WRITERS = 10
WRITE_FOR_S = 15.0
SERIAL_AGGREGATES = [f"s-{i}" for i in range(3)]
FREE_AGGREGATES = [f"f-{i}" for i in range(20)]

CREATE_LOCKS = text("CREATE TABLE aggregate_locks (aggregate_id varchar(100) NOT NULL PRIMARY KEY, "
                    "version int NOT NULL)")
UPDATE_LOCK = text("UPDATE aggregate_locks SET version = :v WHERE aggregate_id = :a")


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> str:
    return database_url(request, read_committed_snapshot=True)


@dataclass
class Ledger:
    """What the writers did, as they saw it."""

    committed: set[str] = field(default_factory=set)
    rolled_back: set[str] = field(default_factory=set)
    # (commit time, lowest seq of the transaction), to count commits that came after a higher seq's.
    commits: list[tuple[float, int]] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _insert(conn: Connection, aggregate_type: str, aggregate_id: str, body: dict[str, object]) -> tuple[str, int]:
    event_id = f"{aggregate_id}-{uuid.uuid4().hex[:12]}"
    seq = writer_sql(conn).insert(conn, event_id, aggregate_type, aggregate_id, json.dumps(body))
    return event_id, seq


def _transaction(conn: Connection, kind: str, rng: random.Random) -> tuple[str, list[str], list[str], list[int]]:
    """One transaction of `kind`: (the kind it ended as, event_ids kept, event_ids undone, seqs kept)."""
    sql = writer_sql(conn)
    kept: list[str] = []
    dropped: list[str] = []
    seqs: list[int] = []
    trans = conn.begin()
    if kind == "serial":
        aggregate = rng.choice(SERIAL_AGGREGATES)
        version = sql.lock_aggregate(conn, aggregate) + 1
        event_id, seq = _insert(conn, "account", aggregate, {"version": version})
        conn.execute(UPDATE_LOCK, {"v": version, "a": aggregate})
        kept.append(event_id)
        seqs.append(seq)
        time.sleep(rng.uniform(0, 0.5))  # hold the lock while others queue behind it
        if rng.random() < 0.1:
            kind = "serial_rollback"
    elif kind == "savepoint":
        event_id, seq = _insert(conn, "order", rng.choice(FREE_AGGREGATES), {"k": kind})
        kept.append(event_id)
        seqs.append(seq)
        sql.savepoint(conn, "undo")
        event_id, seq = _insert(conn, "order", rng.choice(FREE_AGGREGATES), {"k": "undone"})
        dropped.append(event_id)
        sql.rollback_to(conn, "undo")
        event_id, seq = _insert(conn, "order", rng.choice(FREE_AGGREGATES), {"k": kind})
        kept.append(event_id)
        seqs.append(seq)
    else:
        for _ in range(rng.randint(1, 3)):
            event_id, seq = _insert(conn, "order", rng.choice(FREE_AGGREGATES), {"k": kind})
            kept.append(event_id)
            seqs.append(seq)
        if kind == "slow_commit":
            time.sleep(rng.uniform(1.0, 3.0))  # later transactions commit meanwhile
        elif kind == "rollback":
            time.sleep(rng.uniform(0, 1.5))
    if kind in ("rollback", "serial_rollback"):
        trans.rollback()
        return kind, [], dropped + kept, seqs
    trans.commit()
    return kind, kept, dropped, seqs


def _writer(url: str, seed: int, deadline: float, ledger: Ledger) -> None:
    rng = random.Random(seed)
    engine = create_engine(url, pool_size=1)
    kinds = ["commit"] * 7 + ["slow_commit"] * 2 + ["rollback"] * 3 + ["serial"] * 6 + ["savepoint"] * 1
    try:
        while time.monotonic() < deadline:
            kind = rng.choice(kinds)
            with engine.connect() as conn:
                try:
                    kind, kept, dropped, seqs = _transaction(conn, kind, rng)
                except DBAPIError as exc:
                    if not writer_sql(conn).is_deadlock(exc):
                        raise
                    # The server rolled the whole transaction back: its seqs are holes like any rollback's.
                    kind, kept, dropped, seqs = "deadlock_victim", [], [], []
            with ledger.lock:
                ledger.kinds[kind] = ledger.kinds.get(kind, 0) + 1
                ledger.committed.update(kept)
                ledger.rolled_back.update(dropped)
                if kept:
                    ledger.commits.append((time.monotonic(), min(seqs)))
            time.sleep(rng.uniform(0, 0.05))
    except Exception as exc:  # noqa: BLE001 - recorded, and the test fails on it
        with ledger.lock:
            ledger.errors.append(repr(exc))
    finally:
        engine.dispose()


def test_adversarial_commit_orders_publish_every_committed_event_in_seq_order(
    db_url: str, kafka_bootstrap: str
) -> None:
    url = db_url
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(CREATE_LOCKS)
        for aggregate in SERIAL_AGGREGATES:
            conn.execute(text("INSERT INTO aggregate_locks VALUES (:a, 0)"), {"a": aggregate})
    config = bridge_config(url, kafka_bootstrap, persist_interval_s=0.2)
    bridge = start_bridge(config)
    seed = random.randrange(1 << 30)
    print(f"writer seed {seed}")
    ledger = Ledger()
    deadline = time.monotonic() + WRITE_FOR_S
    writers = [threading.Thread(target=_writer, args=(url, seed + i, deadline, ledger), daemon=True)
               for i in range(WRITERS)]
    started = time.monotonic()
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(WRITE_FOR_S + 10)
    assert not any(w.is_alive() for w in writers), "a writer hung"
    # One last committed event, so every rolled-back seq lies below a visible row and is settled.
    with engine.begin() as conn:
        event_id, last_seq = _insert(conn, "order", "f-0", {"k": "last"})
    ledger.committed.add(event_id)
    engine.dispose()

    wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == last_seq, 30,
               f"the watermark to reach the last seq {last_seq}")
    caught_up = time.monotonic() - started
    daemon = bridge.daemon
    assert bridge.stop() == 0

    records = read_topic(kafka_bootstrap, config.topic_for("order")) + read_topic(
        kafka_bootstrap, config.topic_for("account"))
    published = [dict(m.headers())["event_id"].decode() for m in records]
    rows = committed_seqs(url)
    late = sum(1 for i, (_, low) in enumerate(ledger.commits)
               if any(other_low > low for _, other_low in ledger.commits[:i]))
    print(f"[{engine.dialect.name}] {len(ledger.committed)} committed, {len(ledger.rolled_back)} rolled back, "
          f"kinds {ledger.kinds}, "
          f"{late} commits after a higher seq had committed, {daemon.holes_settled} holes settled, "
          f"caught up {caught_up:.1f}s after the writers started")

    assert not ledger.errors, f"a writer failed: {ledger.errors[:3]}"
    assert late > 0 and ledger.kinds.get("slow_commit", 0) > 0 and ledger.rolled_back, "the schedule was adversarial"
    assert set(published) == ledger.committed, "every committed event is published"
    assert len(published) == len(set(published)), "and only once"
    assert not set(published) & ledger.rolled_back, "no rolled-back event is published"
    assert sorted(record_seq(m) for m in records) == rows
    assert daemon.holes_settled == last_seq - len(rows), "every rolled-back seq was settled as a hole"

    for key, seqs in keys_in_seq_order(records).items():
        assert seqs == sorted(seqs), f"aggregate {key!r}: events out of seq order {seqs}"
    by_aggregate: dict[str, list[int]] = {}
    for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
        if m.topic() == config.topic_for("account"):
            by_aggregate.setdefault(m.key().decode(), []).append(json.loads(m.value())["version"])
    assert set(by_aggregate) == set(SERIAL_AGGREGATES)
    for aggregate, versions in by_aggregate.items():
        assert versions == list(range(1, len(versions) + 1)), f"{aggregate}: versions {versions}"
