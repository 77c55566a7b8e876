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
from sqlalchemy import insert, select, text

from bridge.migrate import upgrade
from bridge.schema import domain_events
from bridge.store import maintenance
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
        assert outbox_row_count(url) == EVENTS, \
            f"B ({b.bridge_name}) has published none of them: retention keeps them all"
        registry = bridge_a.daemon.metrics.registry
        held = registry.get_sample_value("outbox_retention_held_back_seconds", {"held_by": b.bridge_name})
        assert held is not None and held > 3600, "the gauge names B and how long its rows have been due"
        assert registry.get_sample_value("outbox_retention_hold_alert_after_seconds") == 6 * 3600
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
        wait_until(lambda: outbox_row_count(url) == 0, 30, "A's retention to delete what both names published")
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
    assert outbox_row_count(url) == EVENTS - 10


def _events_gone_for(url: str, a: object, b_name: str) -> None:
    """Retire B (audited), then A's cleanup deletes all fifty: B no longer holds retention back."""
    from bridge.config import parse_duration
    from bridge.names import list_names, retire

    listed = list_names(a.database, parse_duration(a.retention_hold_alert_after))
    [held] = [n for n in listed if n["bridge_name"] == b_name]
    assert held["holds_retention_back"] and held["not_led_for_long"] and held["lag_events"] == EVENTS
    retired = retire(a.database, b_name, reason="cluster decommissioned")
    assert retired["watermark"] == 0
    result = maintenance.cleanup(a.database, timedelta(hours=1), dry_run=False, show_progress=False)
    assert result["deleted"] == EVENTS and result["held_back_by"] is None
    assert outbox_row_count(url) == 0


def test_a_retired_name_holds_nothing_back_and_leads_again_only_when_told_where_to_start(
    url, kafka_bootstrap, tmp_path
) -> None:
    from tests.support import bridge_env, spawn_bridge

    b = bridge_config(url, kafka_bootstrap)
    _outbox_with_b_stopped(url, b.bridge_name)
    a = bridge_config(url, kafka_bootstrap, bridge_name="a")
    engine = make_engine(url)
    OffsetStore(engine, "a").set_watermark(EVENTS)
    engine.dispose()
    _events_gone_for(url, a, b.bridge_name)

    env = bridge_env(url, kafka_bootstrap, b.bridge_name, b.topic_template, persist_interval_s=0.2)
    refused = spawn_bridge(env, tmp_path / "b.log")
    try:
        assert refused.wait(60) == 10, "a retired name does not lead by itself"
    finally:
        refused.stop_if_running()
    [line] = [entry for entry in refused.log_lines() if entry.get("msg", "").startswith("refusing to lead")]
    assert "was retired at" in line["error"] and "cluster decommissioned" in line["error"]
    assert "--start-from earliest" in line["error"]
    from bridge.status import collect_status

    status = collect_status(b.database)
    assert status["retired_at"] is not None and "retired" in status["last_error"]

    # Told where to start, it leads again from there: the next event written, audited.
    _insert_one(url)
    started = spawn_bridge(env | {"BRIDGE_START_FROM": "earliest"}, tmp_path / "b.log")
    try:
        wait_until(lambda: persisted_watermark(url, b.bridge_name) == EVENTS + 1, 60, "B to publish the new event")
    finally:
        started.signal(15)
        assert started.wait(60) == 0
    assert [record_seq(m) for m in read_topic(kafka_bootstrap, b.topic_for("order"))] == [EVENTS + 1]
    start = _audit_rows(url, b.bridge_name, "start")
    assert len(start) == 1 and start[0]["from_seq"] == EVENTS + 1 and start[0]["to_seq"] == EVENTS
    assert "accepting that deleted seqs up to 50" in start[0]["reason"]
    assert len(_audit_rows(url, b.bridge_name, "retire")) == 1


def test_a_name_whose_rows_an_older_release_deleted_refuses_naming_the_seqs(url) -> None:
    """Before revision 0004, cleanup looked at one name's watermark and recorded nothing: B (watermark 0) lost
    rows 1..50 to A's cleanup. The upgrade records what is gone, and B refuses to lead."""
    from bridge.daemon.history import EXIT_ROWS_GONE
    from tests.support import start_bridge as start

    upgrade(url, "0003")
    engine = make_engine(url)
    with engine.begin() as conn:
        # Revision 0003's bridge_offsets, as the older release wrote it.
        conn.execute(text("INSERT INTO bridge_offsets (bridge_name, watermark, epoch, updated_at) "
                          "VALUES ('b', 0, 1, CURRENT_TIMESTAMP), ('a', :w, 1, CURRENT_TIMESTAMP)"), {"w": EVENTS})
        conn.execute(insert(domain_events), [
            {"event_id": f"e-{n}", "aggregate_type": "order", "aggregate_id": "order-1", "event_type": "Placed",
             "payload": "{}", "occurred_at": TWO_HOURS_AGO} for n in range(1, EVENTS + 1)])
        conn.execute(domain_events.delete())  # what the older release's cleanup did
    engine.dispose()
    upgrade(url)
    b = bridge_config(url, "127.0.0.1:1", bridge_name="b")
    bridge = start(b)
    bridge.thread.join(30)
    assert bridge.result == [EXIT_ROWS_GONE]
    assert "seqs 1 to 50" in (bridge.daemon.last_error or "")
    assert "before revision 0004" in (bridge.daemon.last_error or "")
    assert persisted_watermark(url, "b") == 0, "nothing moved"


def test_a_new_name_on_an_outbox_whose_early_rows_are_gone_starts_only_where_told(url, kafka_bootstrap) -> None:
    from bridge.daemon.history import EXIT_ROWS_GONE

    _outbox_with_b_stopped(url, "b")
    a = bridge_config(url, kafka_bootstrap, bridge_name="a")
    engine = make_engine(url)
    OffsetStore(engine, "a").set_watermark(EVENTS)
    OffsetStore(engine, "b").set_watermark(30)
    engine.dispose()
    assert maintenance.cleanup(a.database, timedelta(hours=1), dry_run=False, show_progress=False)["deleted"] == 30

    new = bridge_config(url, kafka_bootstrap)
    refused = start_bridge(new)
    refused.thread.join(30)
    assert refused.result == [EXIT_ROWS_GONE]
    error = refused.daemon.last_error or ""
    assert f"bridge name {new.bridge_name!r} is new on this outbox" in error and "seqs 1 to 30" in error
    assert "--start-from earliest` (the oldest row still in the outbox, seq 31)" in error

    told = start_bridge(bridge_config(url, kafka_bootstrap, bridge_name=new.bridge_name,
                                      topic_template=new.topic_template, start_from="41"))
    try:
        wait_until(lambda: persisted_watermark(url, new.bridge_name) == EVENTS, 60, "the new name to publish")
    finally:
        assert told.stop() == 0
    assert sorted(record_seq(m) for m in read_topic(kafka_bootstrap, new.topic_for("order"))) == list(
        range(41, EVENTS + 1))
    [start] = _audit_rows(url, new.bridge_name, "start")
    assert start["from_seq"] == 41 and start["to_seq"] == 30, "the deleted seqs it will never publish"


def test_names_status_and_doctor_name_the_name_that_holds_retention_back(url, kafka_bootstrap) -> None:
    from bridge.doctor import BridgeDoctor, Verdict
    from bridge.status import collect_status

    _outbox_with_b_stopped(url, "b")
    engine = make_engine(url)
    OffsetStore(engine, "a").set_watermark(EVENTS)
    engine.dispose()
    a = bridge_config(url, kafka_bootstrap, bridge_name="a", retention="1h")
    status = collect_status(a.database)
    assert status["retention_held_back_by"] == {"bridge_name": "b", "up_to_seq": 0}
    checks = {(c.name, c.verdict): c for c in BridgeDoctor(a).run()}
    assert "'b' holds it back at seq 0" in checks[("retention", Verdict.WARNING)].summary
    names = checks[("names", Verdict.WARNING)]
    assert "'b' (watermark 0) has not led" in names.summary and "names retire b" in (names.fix or "")


def _insert_one(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(domain_events).values(event_id=f"e-{uuid.uuid4().hex}", aggregate_type="order",
                                                  aggregate_id="order-9", event_type="Placed", payload="{}"))
    engine.dispose()


def _audit_rows(url: str, name: str, mode: str) -> list[dict[str, object]]:
    from bridge.schema import bridge_replay_audit as audit

    engine = make_engine(url)
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(
            select(audit).where(audit.c.bridge_name == name, audit.c.mode == mode)).mappings()]
    engine.dispose()
    return rows
