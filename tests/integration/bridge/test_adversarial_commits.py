"""Adversarial commit orders on PostgreSQL, with the daemon running: many concurrent writers, random
rollbacks (whole transactions and savepoints), transactions held open for 1-3 s while later ones
commit, and writers that serialise on an aggregate (SELECT ... FOR UPDATE on its lock row, then
insert). Every committed event is published exactly once, no rolled-back one is, every rolled-back
seq is settled as a hole, and each aggregate's events arrive in seq order."""

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

from bridge.migrate import upgrade
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

INSERT = text(
    "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
    "VALUES (:event_id, :aggregate_type, :aggregate_id, 'Happened', :payload) RETURNING seq"
)

LOCK = text("SELECT version FROM aggregate_locks WHERE aggregate_id = :a FOR UPDATE")


@dataclass
class Ledger:
    """What the writers did, as they saw it."""

    committed: set[str] = field(default_factory=set)
    rolled_back: set[str] = field(default_factory=set)
    # (commit time, lowest seq of the transaction), to count commits that came after a higher seq's.
    commits: list[tuple[float, int]] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _insert(conn: Connection, aggregate_type: str, aggregate_id: str, body: dict[str, object]) -> tuple[str, int]:
    event_id = f"{aggregate_id}-{uuid.uuid4().hex[:12]}"
    seq = conn.execute(INSERT, {"event_id": event_id, "aggregate_type": aggregate_type,
                                "aggregate_id": aggregate_id, "payload": json.dumps(body)}).scalar_one()
    return event_id, int(seq)


def _writer(url: str, seed: int, deadline: float, ledger: Ledger) -> None:
    rng = random.Random(seed)
    engine = create_engine(url, pool_size=1)
    kinds = ["commit"] * 7 + ["slow_commit"] * 2 + ["rollback"] * 3 + ["serial"] * 6 + ["savepoint"] * 1
    try:
        while time.monotonic() < deadline:
            kind = rng.choice(kinds)
            kept: list[str] = []
            dropped: list[str] = []
            seqs: list[int] = []
            with engine.connect() as conn:
                trans = conn.begin()
                if kind == "serial":
                    aggregate = rng.choice(SERIAL_AGGREGATES)
                    version = conn.execute(LOCK, {"a": aggregate}).scalar_one() + 1
                    event_id, seq = _insert(conn, "account", aggregate, {"version": version})
                    conn.execute(text("UPDATE aggregate_locks SET version = :v WHERE aggregate_id = :a"),
                                 {"v": version, "a": aggregate})
                    kept.append(event_id)
                    seqs.append(seq)
                    time.sleep(rng.uniform(0, 0.5))  # hold the lock while others queue behind it
                    if rng.random() < 0.1:
                        kind = "serial_rollback"
                elif kind == "savepoint":
                    event_id, seq = _insert(conn, "order", rng.choice(FREE_AGGREGATES), {"k": kind})
                    kept.append(event_id)
                    seqs.append(seq)
                    savepoint = conn.begin_nested()
                    event_id, seq = _insert(conn, "order", rng.choice(FREE_AGGREGATES), {"k": "undone"})
                    dropped.append(event_id)
                    savepoint.rollback()
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
                    dropped.extend(kept)
                    kept = []
                else:
                    trans.commit()
            with ledger.lock:
                ledger.kinds[kind] = ledger.kinds.get(kind, 0) + 1
                ledger.committed.update(kept)
                ledger.rolled_back.update(dropped)
                if kept:
                    ledger.commits.append((time.monotonic(), min(seqs)))
            time.sleep(rng.uniform(0, 0.05))
    finally:
        engine.dispose()


def test_adversarial_commit_orders_publish_every_committed_event_in_seq_order(postgres_url, kafka_bootstrap) -> None:
    url = postgres_url
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE aggregate_locks (aggregate_id text PRIMARY KEY, version int NOT NULL)"))
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
    print(f"{len(ledger.committed)} committed, {len(ledger.rolled_back)} rolled back, kinds {ledger.kinds}, "
          f"{late} commits after a higher seq had committed, {daemon.holes_settled} holes settled, "
          f"caught up {caught_up:.1f}s after the writers started")

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
