"""The pace of outbox reads: a caught-up bridge reads a trickle of commits a few rows at a time, at most once per
`poll_interval_min_ms`, while a backlog is read without pause; and what a caught-up read sent, the outbox's tail, is
sent at once rather than after the producer's linger.ms, while a backlog's records linger to fill batches.

Each read is a query (and on PostgreSQL a pool check-out with its ping, and a rollback). Before the pace, a
bridge at 1,000 commits/s made about a thousand of them a second, one or two rows each.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from bridge.core.records import KafkaRecord
from bridge.kafka.testing import InMemoryPublisher
from bridge.migrate import upgrade
from bridge.store.reader import Batch, TailReader
from tests.support import running, start_unit_bridge

INSERT = text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
              "VALUES (:e, 'order', 'a', 'Placed', '{}')")


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[float, int, int]]]:
    """Every outbox read the daemon makes: (when it started, rows asked for, rows it returned)."""
    seen: list[tuple[float, int, int]] = []
    poll = TailReader.poll

    def counted(self: TailReader[object], after: int, limit: int) -> Batch:
        started = time.monotonic()
        batch = poll(self, after, limit)
        seen.append((started, limit, len(batch.rows)))
        return batch

    monkeypatch.setattr(TailReader, "poll", counted)
    yield seen


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the daemon did, in order: "read full", "read caught up" (rows, fewer than asked), "read empty", and
    "send queued" (the publisher asked to send what it holds now, not after linger.ms)."""
    seen: list[str] = []
    poll = TailReader.poll

    def read(self: TailReader[object], after: int, limit: int) -> Batch:
        batch = poll(self, after, limit)
        seen.append("read empty" if not batch.rows else "read full" if len(batch.rows) == limit else "read caught up")
        return batch

    send_queued = InMemoryPublisher.send_queued

    def queued(self: InMemoryPublisher, timeout: float) -> int:
        seen.append("send queued")
        return send_queued(self, timeout)

    monkeypatch.setattr(TailReader, "poll", read)
    monkeypatch.setattr(InMemoryPublisher, "send_queued", queued)
    yield seen


def _run(url: str, until: int, **flags: object) -> list[KafkaRecord]:
    delivered: list[KafkaRecord] = []
    with running(start_unit_bridge(url, "pace", delivered, **flags)):
        deadline = time.monotonic() + 30
        while len(delivered) < until and time.monotonic() < deadline:
            time.sleep(0.01)
    return delivered


def test_a_trickle_of_commits_is_read_at_most_once_per_minimum_interval(
        tmp_path: Path, reads: list[tuple[float, int, int]]) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    interval_s, events = 0.025, 300
    engine = create_engine(url)

    def trickle() -> None:  # one commit every 2 ms, each its own transaction
        for i in range(events):
            with engine.begin() as conn:
                conn.execute(INSERT, {"e": f"e-{i}"})
            time.sleep(0.002)

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    delivered = _run(url, events, poll_interval_min_ms=int(interval_s * 1000), poll_interval_max_ms=100)
    writer.join(10)
    engine.dispose()
    assert [r.seq for r in delivered] == list(range(1, events + 1))
    with_rows = [(at, got) for at, _, got in reads if got]
    span = with_rows[-1][0] - with_rows[0][0]
    assert len(reads) <= span / interval_s + 5, (
        f"{len(reads)} reads in {span:.2f}s: more than one per {interval_s * 1000:.0f} ms while caught up"
    )
    assert len(with_rows) < events / 3, f"{len(with_rows)} reads for {events} events: a row or two per query"
    gaps = [later - earlier for (earlier, _, _), (later, _, _) in itertools.pairwise(reads)]
    assert min(gaps) >= interval_s * 0.9, f"two reads {min(gaps) * 1000:.1f} ms apart while caught up"


def test_a_backlog_is_read_without_pause(tmp_path: Path, reads: list[tuple[float, int, int]]) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(INSERT, [{"e": f"e-{i}"} for i in range(1000)])
    engine.dispose()
    # Long beside a read of 100 rows (milliseconds), and short: stopping waits out the idle read wait.
    interval_s = 1.0
    delivered = _run(url, 1000, read_batch_size=100, poll_interval_min_ms=int(interval_s * 1000),
                     poll_interval_max_ms=int(interval_s * 1000))
    assert [r.seq for r in delivered] == list(range(1, 1001))
    full = [i for i, (_, asked, got) in enumerate(reads) if got == asked]
    assert len(full) == 10
    for i in full:
        if i + 1 < len(reads):
            assert reads[i + 1][0] - reads[i][0] < interval_s / 2, "the read after a full one waited"


def test_the_tail_is_sent_at_once_and_a_backlog_lingers(tmp_path: Path, steps: list[str]) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(INSERT, [{"e": f"b-{i}"} for i in range(450)])  # a backlog: four full reads, then the tail

    def trickle() -> None:
        time.sleep(0.3)
        for i in range(40):
            with engine.begin() as conn:
                conn.execute(INSERT, {"e": f"t-{i}"})
            time.sleep(0.01)

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    # An interval long beside a read of a few rows, so that every caught-up read is followed by its wait.
    delivered = _run(url, 490, read_batch_size=100, poll_interval_min_ms=25, poll_interval_max_ms=50)
    writer.join(10)
    engine.dispose()
    assert [r.seq for r in delivered] == list(range(1, 491))
    after = list(itertools.pairwise(steps))
    tails = [following for step, following in after if step == "read caught up"]
    assert len(tails) >= 5, f"the trickle was read in {len(tails)} caught-up reads: {steps[:40]}"
    assert all(following == "send queued" for following in tails), (
        f"a caught-up read not followed by sending its rows at once: {steps[:60]}")
    assert steps[:4] == ["read full"] * 4, steps[:10]
    assert all(following != "send queued" for step, following in after if step != "read caught up"), (
        f"records sent at once after a read that was not the tail: {steps[:60]}")
