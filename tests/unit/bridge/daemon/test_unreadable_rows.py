"""A row written by plain SQL that the bridge cannot even read as an event (SQLite takes any value in any
column: a BLOB payload, text that is not UTF-8, an occurred_at that is no timestamp) meets the poison
policy like any unpublishable row: `halt` stops after everything before it, naming its seq and the fix;
`dead-letter` sends it to the dead-letter topic and goes on. It never crashes the bridge in a loop.
SQLite outbox, in-memory publisher and topic guard."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from bridge.config import load_config
from bridge.core.records import KafkaRecord
from bridge.daemon import EXIT_POISON, BridgeDaemon, build_daemon
from bridge.kafka.testing import AcceptingTopicGuard, publisher_factory
from bridge.migrate import upgrade
from tests.unit.bridge.daemon.test_rewind import _wait, _watermark

pytestmark = pytest.mark.unit

BAD_SEQ = 3
EVENTS = 5

#: A plain SQL INSERT any application may run, and what the operator is told about the row it writes.
UNREADABLE = {
    "occurred_at is not a timestamp": (
        "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) "
        "VALUES ('bad', 'order', 'a-1', 'Placed', '{}', 'yesterday')",
        "occurred_at 'yesterday' is not an ISO 8601 timestamp",
    ),
    "occurred_at is a number": (
        "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) "
        "VALUES ('bad', 'order', 'a-1', 'Placed', '{}', 1700000000)",
        "occurred_at '1700000000' is not an ISO 8601 timestamp",
    ),
    "payload is a BLOB": (
        "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
        "VALUES ('bad', 'order', 'a-1', 'Placed', X'7B7D')",
        "payload is a BLOB, not text",
    ),
    "payload is not UTF-8": (
        "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
        "VALUES ('bad', 'order', 'a-1', 'Placed', CAST(X'7BFF7D' AS TEXT))",
        "payload is not UTF-8 text (byte 0xff at offset 1)",
    ),
}


def _outbox(tmp_path: Path, insert_bad: str) -> str:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    engine = create_engine(url)
    good = text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                "VALUES (:e, 'order', 'a-1', 'Placed', '{}')")
    with engine.begin() as conn:
        for seq in range(1, EVENTS + 1):
            conn.execute(text(insert_bad)) if seq == BAD_SEQ else conn.execute(good, {"e": f"e-{seq}"})
    engine.dispose()
    return url


def _daemon(url: str, policy: str, sent: list[KafkaRecord]) -> BridgeDaemon:
    config = load_config(flags={"db_url": url, "bridge_name": "unit", "allow_single_broker": True,
                                "replication_factor": 1, "metrics_port": 0, "persist_interval_s": 0.05,
                                "poison_policy": policy}, env={})
    return build_daemon(config, publisher_factory=publisher_factory(sent),
                        topic_guard=AcceptingTopicGuard(), instance_id="unit")


@pytest.mark.parametrize(("insert_bad", "reason"), UNREADABLE.values(), ids=UNREADABLE.keys())
def test_halt_stops_after_the_rows_before_an_unreadable_row_naming_its_seq_and_the_fix(
    tmp_path: Path, insert_bad: str, reason: str
) -> None:
    url = _outbox(tmp_path, insert_bad)
    sent: list[KafkaRecord] = []
    daemon = _daemon(url, "halt", sent)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()), daemon=True)
    thread.start()
    thread.join(20)
    daemon.stop()
    assert result == [EXIT_POISON], f"the bridge did not halt: {daemon.last_error}"
    assert daemon.halted is not None and daemon.halted.seq == BAD_SEQ
    assert reason in daemon.halted.reason
    assert [record.seq for record in sent] == list(range(1, BAD_SEQ))
    assert _watermark(url) == BAD_SEQ - 1


@pytest.mark.parametrize(("insert_bad", "reason"), UNREADABLE.values(), ids=UNREADABLE.keys())
def test_dead_letter_sends_an_unreadable_row_to_the_dead_letter_topic_and_goes_on(
    tmp_path: Path, insert_bad: str, reason: str
) -> None:
    url = _outbox(tmp_path, insert_bad)
    sent: list[KafkaRecord] = []
    daemon = _daemon(url, "dead-letter", sent)
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        _wait(lambda: _watermark(url) == EVENTS, "every row, the unreadable one included, to be accounted for")
    finally:
        daemon.stop()
        thread.join(10)
    by_seq = {record.seq: record for record in sent}
    assert sorted(by_seq) == list(range(1, EVENTS + 1))
    dead = by_seq[BAD_SEQ]
    assert dead.topic == "outbox.dlq.unit"
    assert reason in dict(dead.headers)["dlq_reason"].decode()
    assert all(by_seq[seq].topic == "outbox.event.order" for seq in by_seq if seq != BAD_SEQ)
