"""Exactly-once delivery with retention and two bridge names on one outbox, as teams run a second cluster.

Bridge B is registered and stopped; fifty old events arrive; bridge A (exactly-once, with retention) publishes
them, and its retention keeps them for B. B (exactly-once too: its own transactional.id and progress record)
publishes them; then A's retention deletes them, Kafka's progress records still naming the deleted last event.
Both restart, five more events are written, and each name's topic holds every event once, read_committed, in seq
order per aggregate; neither restart mistakes a progress record whose event retention deleted for another
outbox's.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert

from bridge.config import BridgeConfig
from bridge.migrate import upgrade
from bridge.schema import domain_events
from bridge.status import collect_status
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore
from tests.support import (
    bridge_config,
    keys_in_seq_order,
    outbox_row_count,
    persisted_watermark,
    read_topic,
    record_seq,
    start_bridge,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

OLD, NEW = 50, 5


def _insert(url: str, first: int, count: int, occurred_at: datetime) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(domain_events), [
            {"event_id": f"e-{uuid.uuid4().hex}", "aggregate_type": "order", "aggregate_id": f"order-{n % 5}",
             "event_type": "Placed", "payload": f'{{"n": {n}}}', "occurred_at": occurred_at}
            for n in range(first, first + count)])
    engine.dispose()



def _published_by(config: BridgeConfig, url: str, through: int) -> None:
    bridge = start_bridge(config)
    name = config.bridge_name
    try:
        wait_until(lambda: persisted_watermark(url, name) == through, 60, f"{name} to publish through {through}")
    finally:
        assert bridge.stop() == 0


def test_two_exactly_once_names_with_retention_publish_every_event_once_and_resume_after_deletion(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    b = bridge_config(url, kafka_bootstrap, delivery="exactly-once")
    a = bridge_config(url, kafka_bootstrap, delivery="exactly-once", retention="1m", retention_interval_s=1)
    engine = make_engine(url)
    OffsetStore(engine, b.bridge_name).ensure_row()  # B led once and was stopped
    engine.dispose()
    _insert(url, 1, OLD, datetime.now(UTC) - timedelta(hours=2))

    bridge_a = start_bridge(a)
    try:
        wait_until(lambda: persisted_watermark(url, a.bridge_name) == OLD, 60, "A to publish every event")
        passes = bridge_a.daemon.retention_passes
        wait_until(lambda: bridge_a.daemon.retention_passes >= passes + 2, 30, "two more retention passes")
        assert outbox_row_count(url) == OLD, "B has published none of them: A's retention keeps them all"
        assert collect_status(a.database)["delivery"] == "exactly-once", "status says how the leader delivers"
    finally:
        assert bridge_a.stop() == 0
    _published_by(b, url, OLD)
    bridge_a = start_bridge(a)
    try:
        wait_until(lambda: outbox_row_count(url) == 0, 30, "A's retention to delete what both names published")
    finally:
        assert bridge_a.stop() == 0

    # Both resume with the event their progress records name deleted, and publish what follows.
    _insert(url, OLD + 1, NEW, datetime.now(UTC))
    with caplog.at_level(logging.WARNING, logger="bridge.kafka.progress"):
        _published_by(a, url, OLD + NEW)
        _published_by(b, url, OLD + NEW)
    assert not [r for r in caplog.records if "is not this outbox's" in r.getMessage()], \
        "a progress record at the watermark is not questioned, though retention deleted its event"

    for config in (a, b):
        records = read_topic(kafka_bootstrap, config.topic_for("order"))
        assert sorted(record_seq(m) for m in records) == list(range(1, OLD + NEW + 1)), \
            f"{config.bridge_name}: every event once, read_committed"
        for key, seqs in keys_in_seq_order(records).items():
            assert seqs == sorted(seqs), f"{config.bridge_name}: {key!r} in seq order"
