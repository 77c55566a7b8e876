"""The leader picks pending rewind requests up on its persist tick: it re-publishes from `from_seq`
and marks the request applied; a request above the watermark (it would skip events) is refused and
changes nothing. SQLite outbox, in-memory publisher and topic guard."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, insert, select, text

from bridge.config import load_config
from bridge.core.records import KafkaRecord
from bridge.daemon import BridgeDaemon, build_daemon
from bridge.kafka.testing import AcceptingTopicGuard, publisher_factory
from bridge.migrate import upgrade
from bridge.schema import bridge_replay_audit
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore

EVENTS = 20


@pytest.fixture()
def running(tmp_path: Path) -> Iterator[tuple[str, BridgeDaemon, list[KafkaRecord]]]:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                          "VALUES (:e, 'order', 'a-1', 'Placed', '{}')"), [{"e": f"e-{i}"} for i in range(EVENTS)])
    engine.dispose()
    config = load_config(flags={"db_url": url, "bridge_name": "unit", "allow_single_broker": True,
                                "replication_factor": 1, "metrics_port": 0, "persist_interval_s": 0.05}, env={})
    sent: list[KafkaRecord] = []
    daemon = build_daemon(config, publisher_factory=publisher_factory(sent),
                          topic_guard=AcceptingTopicGuard(), instance_id="unit")
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    _wait(lambda: _watermark(url) == EVENTS, "the first pass")
    yield url, daemon, sent
    daemon.stop()
    thread.join(10)


def _wait(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _watermark(url: str) -> int:
    engine = make_engine(url)
    row = OffsetStore(engine, "unit").read()
    engine.dispose()
    return row.watermark if row else 0


def _request(url: str, from_seq: int) -> int:
    engine = create_engine(url)
    with engine.begin() as conn:
        request_id = int(conn.execute(insert(bridge_replay_audit).values(
            bridge_name="unit", mode="rewind", from_seq=from_seq, requested_by="test",
            requested_at=datetime.now(UTC), status="pending")).inserted_primary_key[0])
    engine.dispose()
    return request_id


def _status(url: str, request_id: int) -> tuple[str, str | None]:
    engine = create_engine(url)
    with engine.connect() as conn:
        row = conn.execute(select(bridge_replay_audit.c.status, bridge_replay_audit.c.reason)
                           .where(bridge_replay_audit.c.id == request_id)).one()
    engine.dispose()
    return row.status, row.reason


def test_a_pending_rewind_republishes_from_its_seq_and_is_marked_applied(running) -> None:
    url, daemon, sent = running
    request_id = _request(url, 11)
    _wait(lambda: _status(url, request_id)[0] == "applied", "the request to be applied")
    _wait(lambda: daemon.rewinds_applied == 1 and _watermark(url) == EVENTS, "the second pass")
    counts = Counter(record.seq for record in sent)
    assert all(counts[seq] == 1 for seq in range(1, 11))
    assert all(counts[seq] == 2 for seq in range(11, EVENTS + 1))


def test_a_rewind_above_the_watermark_is_refused_and_changes_nothing(running) -> None:
    url, daemon, sent = running
    request_id = _request(url, EVENTS + 5)
    _wait(lambda: _status(url, request_id)[0] == "refused", "the request to be refused")
    _, reason = _status(url, request_id)
    assert reason is not None and "never skips" in reason
    time.sleep(0.2)
    assert _watermark(url) == EVENTS and daemon.rewinds_applied == 0
    assert sorted(record.seq for record in sent) == list(range(1, EVENTS + 1))
