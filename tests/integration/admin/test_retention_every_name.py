"""Retention respects every bridge name on the outbox, and a bridge knows when rows it needed are gone.

Two names on one outbox, as teams run a second Kafka cluster: bridge B led once and was stopped, fifty old
events arrived, and bridge A (with retention) published them. Retention and `cleanup --older-than` delete
only what every registered name has published; a retired name holds nothing back; and a name whose rows
were deleted before it published them refuses to lead, naming the deleted seqs, unless told where to start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select

from bridge.migrate import upgrade
from bridge.schema import domain_events
from bridge.store import maintenance
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore
from tests.support import (
    bridge_config,
    keys_in_seq_order,
    persisted_watermark,
    read_topic,
    record_seq,
    start_bridge,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

EVENTS = 50
TWO_HOURS_AGO = datetime.now(UTC) - timedelta(hours=2)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'outbox.db'}"
    else:
        yield request.getfixturevalue("postgres_url")


def _outbox_with_b_stopped(url: str, b_name: str) -> None:
    """Migrated; bridge B registered (it led once, watermark 0); then EVENTS old events."""
    upgrade(url)
    engine = make_engine(url)
    OffsetStore(engine, b_name).ensure_row()
    with engine.begin() as conn:
        conn.execute(insert(domain_events), [
            {"event_id": f"e-{uuid.uuid4().hex}", "aggregate_type": "order", "aggregate_id": f"order-{n % 5}",
             "event_type": "Placed", "payload": f'{{"n": {n}}}', "occurred_at": TWO_HOURS_AGO}
            for n in range(1, EVENTS + 1)])
    engine.dispose()


def _rows(url: str) -> int:
    engine = make_engine(url)
    with engine.connect() as conn:
        count = int(conn.execute(select(func.count()).select_from(domain_events)).scalar() or 0)
    engine.dispose()
    return count


def test_retention_keeps_rows_a_stopped_name_has_not_published_and_that_name_publishes_all(
    url, kafka_bootstrap
) -> None:
    b = bridge_config(url, kafka_bootstrap)
    _outbox_with_b_stopped(url, b.bridge_name)
    a = bridge_config(url, kafka_bootstrap, retention="1m", retention_interval_s=1)
    bridge_a = start_bridge(a)
    try:
        wait_until(lambda: persisted_watermark(url, a.bridge_name) == EVENTS, 60, "A to publish every event")
        passes = bridge_a.daemon.retention_passes
        wait_until(lambda: bridge_a.daemon.retention_passes >= passes + 2, 30, "two more retention passes")
        assert _rows(url) == EVENTS, f"B ({b.bridge_name}) has published none of them: retention keeps them all"
    finally:
        assert bridge_a.stop() == 0

    bridge_b = start_bridge(b)
    try:
        wait_until(lambda: persisted_watermark(url, b.bridge_name) == EVENTS, 60, "B to publish every event")
    finally:
        assert bridge_b.stop() == 0
    records = read_topic(kafka_bootstrap, b.topic_for("order"))
    assert sorted(record_seq(m) for m in records) == list(range(1, EVENTS + 1)), "B published all fifty"
    for key, seqs in keys_in_seq_order(records).items():
        assert seqs == sorted(seqs), f"{key!r} in seq order"

    # Now that both have published them, A's retention deletes them.
    bridge_a = start_bridge(a)
    try:
        wait_until(lambda: _rows(url) == 0, 30, "A's retention to delete what both names published")
    finally:
        assert bridge_a.stop() == 0


def test_cleanup_older_than_deletes_only_below_the_lowest_watermark(url) -> None:
    _outbox_with_b_stopped(url, "b")
    engine = make_engine(url)
    OffsetStore(engine, "a").set_watermark(EVENTS)
    OffsetStore(engine, "b").set_watermark(10)
    engine.dispose()
    a = bridge_config(url, "127.0.0.1:1", bridge_name="a")

    dry = maintenance.cleanup(a.database, timedelta(hours=1), dry_run=True, show_progress=False)
    assert dry["rows"] == 10 and dry["held_back_by"] == "b"
    result = maintenance.cleanup(a.database, timedelta(hours=1), dry_run=False, show_progress=False)
    assert result["deleted"] == 10, "only what the slowest name, b, has published"
    assert _rows(url) == EVENTS - 10
