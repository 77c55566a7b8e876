"""A dead letter is never the last copy: retention and `cleanup` keep a dead-lettered row, whatever its age,
until an operator resolves it or publishes it again. PostgreSQL and SQLite, a real broker.

The scenario: eleven old events under `BRIDGE_POISON_POLICY=dead-letter` and `BRIDGE_RETENTION=1m`, one of
them too large for its topic and for the dead-letter topic, so its dead-letter copy is cut. Retention then
deletes the ten published rows and keeps the poison one; once resolved, the next pass deletes it too."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select

from bridge.migrate import upgrade
from bridge.schema import domain_events
from bridge.store.engine import make_engine
from tests.support import bridge_config, read_topic, record_seq, start_bridge, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SMALL_LIMIT = 2000
BIG_PAYLOAD = json.dumps({"blob": "x" * 5000})
POISON_SEQ = 6
EVENTS = 11
TWO_HOURS_AGO = datetime.now(UTC) - timedelta(hours=2)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'outbox.db'}"
    else:
        yield request.getfixturevalue("postgres_url")


def _insert_old_events(url: str, payloads: dict[int, str]) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(domain_events), [
            {"event_id": f"e-{uuid.uuid4().hex}", "aggregate_type": "order", "aggregate_id": f"order-{n % 3}",
             "event_type": "Placed", "payload": payloads.get(n, json.dumps({"n": n})), "occurred_at": TWO_HOURS_AGO}
            for n in range(1, EVENTS + 1)])
    engine.dispose()


def _seqs_left(url: str) -> list[int]:
    engine = make_engine(url)
    with engine.connect() as conn:
        seqs = [int(s) for s in conn.execute(select(domain_events.c.seq).order_by(domain_events.c.seq)).scalars()]
    engine.dispose()
    return seqs


def _rows(url: str) -> int:
    engine = make_engine(url)
    with engine.connect() as conn:
        count = int(conn.execute(select(func.count()).select_from(domain_events)).scalar() or 0)
    engine.dispose()
    return count


def test_retention_keeps_a_dead_lettered_row_until_it_is_resolved(url, kafka_bootstrap, topic_factory) -> None:
    upgrade(url)
    config = bridge_config(url, kafka_bootstrap, poison_policy="dead-letter", retention="1m",
                           retention_interval_s=1)
    topic_factory(name=config.topic_for("order"), partitions=3, config={"max.message.bytes": str(SMALL_LIMIT)})
    # The dead-letter topic refuses the whole payload too, so the copy there is cut to fit.
    topic_factory(name=config.dlq_topic_name, partitions=1, config={"max.message.bytes": str(SMALL_LIMIT)})
    _insert_old_events(url, {POISON_SEQ: BIG_PAYLOAD})

    bridge = start_bridge(config)
    try:
        wait_until(lambda: _seqs_left(url) == [POISON_SEQ] or _rows(url) == 0, 90,
                   "retention to delete the published rows")
        assert _seqs_left(url) == [POISON_SEQ], "the dead-lettered row outlives retention"

        from bridge.dead_letters import list_dead_letters, resolve
        from bridge.doctor import BridgeDoctor, Verdict
        from bridge.status import collect_status

        registry = bridge.daemon.metrics.registry
        wait_until(lambda: registry.get_sample_value("outbox_dead_letters_open") == 1, 10, "the open dead letter gauge")
        assert registry.get_sample_value("outbox_dead_letter_oldest_age_seconds") >= 0
        assert registry.get_sample_value("outbox_dead_letter_alert_after_seconds") == 3600
        assert collect_status(config.database)["dead_letters_open"] == 1
        [check] = [c for c in BridgeDoctor(config).run() if c.name == "dead letters"]
        assert check.verdict is Verdict.WARNING and check.summary.startswith("1 open")
        assert "dead-letters republish SEQ" in (check.fix or "")
        [dead] = list_dead_letters(config.database)
        assert (dead.seq, dead.status, dead.payload_truncated) == (POISON_SEQ, "open", True)
        assert dead.payload_bytes == len(BIG_PAYLOAD) and f"over the {SMALL_LIMIT}-byte limit" in dead.reason
        assert dead.dead_letter_topic == config.dlq_topic_name
        resolved = resolve(config.database, POISON_SEQ, POISON_SEQ, reason="cut by hand; order replayed from the ERP")
        assert resolved["resolved"] == [POISON_SEQ]
        wait_until(lambda: _rows(url) == 0, 30, "the next retention pass to delete the resolved row")
        assert list_dead_letters(config.database) == []
        wait_until(lambda: registry.get_sample_value("outbox_dead_letters_open") == 0, 10, "the gauge to drop to 0")
        [closed] = list_dead_letters(config.database, every_status=True)
        assert closed.status == "resolved" and closed.resolution == "cut by hand; order replayed from the ERP"
    finally:
        assert bridge.stop() == 0

    [copy] = read_topic(kafka_bootstrap, config.dlq_topic_name)
    headers = {k: v.decode() for k, v in copy.headers()}
    assert record_seq(copy) == POISON_SEQ
    assert headers["dlq_payload_complete"] == "false", "the dead-letter record says its payload was cut"
    assert int(headers["dlq_payload_truncated_from"]) == len(BIG_PAYLOAD)
    assert headers["dlq_outbox"] == config.database.masked_url, "and where the whole event is kept"
    assert len(copy.value()) < len(BIG_PAYLOAD)


def test_cleanup_older_than_keeps_an_open_dead_letter(url, kafka_bootstrap, topic_factory) -> None:
    upgrade(url)
    config = bridge_config(url, kafka_bootstrap, poison_policy="dead-letter")
    topic_factory(name=config.topic_for("order"), partitions=3, config={"max.message.bytes": str(SMALL_LIMIT)})
    _insert_old_events(url, {POISON_SEQ: BIG_PAYLOAD})
    bridge = start_bridge(config)
    try:
        from tests.support import persisted_watermark

        wait_until(lambda: persisted_watermark(url, config.bridge_name) == EVENTS, 60, "every event to be passed")
    finally:
        assert bridge.stop() == 0

    from bridge.store import maintenance

    result = maintenance.cleanup(config.database, timedelta(hours=1), dry_run=False, show_progress=False)
    assert result["deleted"] == EVENTS - 1
    assert _seqs_left(url) == [POISON_SEQ], "cleanup keeps the open dead letter"
    assert result["kept_for_dead_letters"] == 1


def test_republishing_a_dead_letter_delivers_the_whole_payload_once_the_topic_takes_it(
    postgres_url, kafka_bootstrap, topic_factory
) -> None:
    """The runbook's repair: a 1.5 MB event its topic refused is dead-lettered (cut); the topic's
    max.message.bytes is raised; `dead-letters republish` sends the whole event to its own topic, marks it
    republished (audited) and the next retention pass may delete it."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    url = postgres_url
    upgrade(url)
    huge = json.dumps({"blob": "y" * 1_500_000})
    config = bridge_config(url, kafka_bootstrap, poison_policy="dead-letter",
                           producer_extra={"message.max.bytes": 3_000_000})
    topic = config.topic_for("order")
    topic_factory(name=topic, partitions=3)
    _insert_old_events(url, {POISON_SEQ: huge})
    bridge = start_bridge(config)
    try:
        from tests.support import persisted_watermark

        wait_until(lambda: persisted_watermark(url, config.bridge_name) == EVENTS, 60, "every event to be passed")
    finally:
        assert bridge.stop() == 0
    assert sorted(record_seq(m) for m in read_topic(kafka_bootstrap, topic)) == [
        s for s in range(1, EVENTS + 1) if s != POISON_SEQ]

    from bridge.dead_letters import list_dead_letters, republish

    [dead] = list_dead_letters(config.database)
    assert dead.payload_truncated, "1.5 MB does not fit the dead-letter topic's default limit either"
    raised = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    next(iter(admin.incremental_alter_configs([raised]).values())).result(30)

    result = republish(config, POISON_SEQ, POISON_SEQ, reason="topic limit raised", show_progress=False)
    assert result["delivered"] == 1 and result["republished"] == [POISON_SEQ]
    again = [m for m in read_topic(kafka_bootstrap, topic) if record_seq(m) == POISON_SEQ]
    assert [m.value() for m in again] == [huge.encode()], "the whole payload, in the event's own topic"
    assert list_dead_letters(config.database) == []
    from bridge.store import maintenance

    maintenance.cleanup(config.database, timedelta(hours=1), dry_run=False, show_progress=False)
    assert _rows(url) == 0, "once republished, cleanup may delete it"
