"""`outbox-bridge replay | cleanup | status` against a real outbox and a real Kafka broker."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlalchemy import create_engine, text

from bridge.cli import main
from bridge.migrate import upgrade
from tests.support import bridge_config, head_seq, insert_events, read_topic, start_bridge, wait_until


def _cli(capsys, config, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([args[0], "--db-url", config.db_url.get_secret_value(), "--bootstrap-servers",
                 config.bootstrap_servers, "--bridge-name", config.bridge_name, "--topic-template",
                 config.topic_template, *args[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def _published(url: str, kafka_bootstrap: str, count: int):
    upgrade(url)
    insert_events(url, count)
    config = bridge_config(url, kafka_bootstrap)
    bridge = start_bridge(config)
    wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == count, 60,
               f"{count} events published")
    assert bridge.stop() == 0
    return config


def _audit_rows(url: str) -> list[dict]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(text("SELECT * FROM bridge_replay_audit ORDER BY id")).mappings()]
    engine.dispose()
    return rows


def test_range_replay_publishes_the_range_and_leaves_the_watermark(capsys, postgres_url, kafka_bootstrap,
                                                                   topic_factory, monkeypatch) -> None:
    # The replay checks its target topic as the daemon does: a replication factor of 1 passes on this one-broker
    # development cluster only when allowed.
    monkeypatch.setenv("BRIDGE_ALLOW_SINGLE_BROKER", "true")
    monkeypatch.setenv("BRIDGE_REPLICATION_FACTOR", "1")
    config = _published(postgres_url, kafka_bootstrap, 100)
    target = topic_factory("replay", partitions=1)

    code, out, _ = _cli(capsys, config, "replay", "--mode", "range", "--from-seq", "10", "--to-seq", "20",
                        "--dry-run", "--json")
    assert code == 0
    plan = json.loads(out)
    assert (plan["events"], plan["from_seq"], plan["to_seq"]) == (11, 10, 20)
    assert plan["topics"] == [config.topic_for("order")]
    assert _audit_rows(postgres_url) == [], "a dry run changes nothing"

    code, out, _ = _cli(capsys, config, "replay", "--mode", "range", "--from-seq", "10", "--to-seq", "20",
                        "--topic", target, "--yes", "--json", "--reason", "consumer bug 42")
    assert code == 0, out
    assert json.loads(out)["delivered"] == 11
    seqs = sorted(int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, target))
    assert seqs == list(range(10, 21))
    code, out, _ = _cli(capsys, config, "status", "--json")
    assert json.loads(out)["watermark"] == 100
    audit = _audit_rows(postgres_url)
    assert [(a["mode"], a["status"], a["from_seq"], a["to_seq"], a["reason"]) for a in audit] == [
        ("range", "done", 10, 20, "consumer bug 42")]


def test_rewind_while_stopped_republishes_from_n_only(capsys, sqlite_url, kafka_bootstrap) -> None:
    config = _published(sqlite_url, kafka_bootstrap, 60)
    code, out, _ = _cli(capsys, config, "replay", "--from-seq", "41", "--yes", "--json")
    assert code == 0, out
    assert json.loads(out)["events"] == 20
    code, out, _ = _cli(capsys, config, "status", "--json")
    assert json.loads(out)["watermark"] == 40

    bridge = start_bridge(config)
    wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 60, 60,
               "the rewound events")
    assert bridge.stop() == 0
    seqs = [int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, config.topic_for("order"))]
    counts = {s: seqs.count(s) for s in set(seqs)}
    assert all(counts[s] == 1 for s in range(1, 41)), "nothing before N is re-sent"
    assert all(counts[s] == 2 for s in range(41, 61)), "everything from N on appears again"
    audit = _audit_rows(sqlite_url)
    assert [(a["mode"], a["status"], a["from_seq"]) for a in audit] == [("rewind", "applied", 41)]
    assert audit[0]["requested_by"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from-seq", "31"], "above the watermark 30"),
        (["--from-seq", "5", "--to-seq", "3", "--mode", "range"], "below --from-seq"),
        (["--from-seq", "5", "--to-seq", "99", "--mode", "range"], "above the watermark"),
        (["--from-seq", "5", "--event-type", "X"], "takes no filters"),
        (["--from-seq", "0"], "seqs start at 1"),
    ],
)
def test_replay_refusals_exit_non_zero_and_say_what_to_do(capsys, sqlite_url, kafka_bootstrap, args,
                                                          message) -> None:
    config = _published(sqlite_url, kafka_bootstrap, 30)
    code, _, err = _cli(capsys, config, "replay", *args, "--yes")
    assert code == 5
    assert message in err
    [refused] = _audit_rows(sqlite_url)
    assert refused["status"] == "refused" and message in refused["reason"], "the refused attempt is on record"


def test_cleanup_never_deletes_above_the_watermark_and_the_daemon_keeps_running(
    capsys, postgres_url, kafka_bootstrap
) -> None:
    config = _published(postgres_url, kafka_bootstrap, 300)
    bridge = start_bridge(config)
    try:
        wait_until(lambda: bridge.daemon.ready, 30, "the bridge to lead")
        stop_writing = threading.Event()

        def writer() -> None:
            n = 300
            while not stop_writing.is_set():
                insert_events(postgres_url, 20, start=n)
                n += 20
                time.sleep(0.05)

        thread = threading.Thread(target=writer)
        thread.start()
        code, out, _ = _cli(capsys, config, "cleanup", "--older-than", "0s", "--batch-size", "50", "--yes",
                            "--json")
        stop_writing.set()
        thread.join()
        assert code == 0, out
        result = json.loads(out)
        assert result["deleted"] >= 300
        engine = create_engine(postgres_url)
        with engine.connect() as conn:
            lowest = conn.execute(text("SELECT min(seq) FROM domain_events")).scalar()
        engine.dispose()
        assert lowest is None or lowest > result["watermark"] - 0, "nothing above the watermark was deleted"
        head = head_seq(postgres_url)
        wait_until(lambda: bridge.daemon.tracker.watermark >= head, 60, "the bridge to publish every new event")
    finally:
        assert bridge.stop() == 0
    seqs = {int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, config.topic_for("order"))}
    assert seqs == set(range(1, head + 1)), "the daemon published everything written during the cleanup"

    code, _, err = _cli(capsys, config, "replay", "--from-seq", "1", "--yes")
    assert code == 5 and "oldest event still in the outbox" in err


def test_status_json_matches_the_database(capsys, postgres_url, kafka_bootstrap) -> None:
    config = _published(postgres_url, kafka_bootstrap, 40)
    insert_events(postgres_url, 15, start=40)
    code, out, _ = _cli(capsys, config, "status", "--json")
    assert code == 0
    status = json.loads(out)
    assert (status["watermark"], status["head_seq"], status["lag_events"]) == (40, 55, 15)
    assert status["active_instance"] is None
    assert status["lag_seconds"] >= 0


def test_unknown_setting_value_is_a_configuration_error(capsys, sqlite_url) -> None:
    code = main(["status", "--db-url", "nosuchdialect://x"])
    _, err = capsys.readouterr()
    assert code == 2 and "OUTBOX_DB_URL" in err


def test_status_names_the_transaction_holding_the_horizon(capsys, postgres_url, kafka_bootstrap) -> None:
    config = _published(postgres_url, kafka_bootstrap, 10)
    bridge = start_bridge(config)
    engine = create_engine(postgres_url)
    held = engine.connect()
    try:
        wait_until(lambda: bridge.daemon.ready, 30, "the bridge to lead")
        tx = held.begin()
        held.execute(text("SET application_name = 'slow-batch-job'"))
        holder_pid = held.execute(text("SELECT pg_backend_pid()")).scalar()
        insert_events_on(held, 1, start=10)  # takes seq 11 and stays uncommitted
        insert_events(postgres_url, 5, start=11)  # seqs 12..16 commit
        wait_until(lambda: _status(capsys, config)["horizon_holder"] is not None, 30, "a horizon holder")
        status = _status(capsys, config)
        assert status["horizon_holder"]["pid"] == holder_pid
        assert status["horizon_holder"]["application_name"] == "slow-batch-job"
        assert status["horizon_holder"]["waiting_on_seq"] == 11
        assert status["watermark"] == 10, "nothing after the open transaction's seq is published"
        tx.commit()
        wait_until(lambda: bridge.daemon.tracker.watermark == 16, 30, "publishing to resume")
    finally:
        held.close()
        engine.dispose()
        assert bridge.stop() == 0


def _status(capsys, config) -> dict:
    code, out, _ = _cli(capsys, config, "status", "--json")
    assert code == 0
    return json.loads(out)


def insert_events_on(conn, count: int, start: int) -> None:
    conn.execute(
        text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
             "VALUES (:e, 'order', :a, 'OrderPlaced', '{}')"),
        [{"e": f"held-{start + i}", "a": f"a-{start + i}"} for i in range(count)],
    )


def test_retention_setting_deletes_published_rows_while_the_daemon_publishes(postgres_url, kafka_bootstrap) -> None:
    upgrade(postgres_url)
    insert_events(postgres_url, 200)
    config = bridge_config(postgres_url, kafka_bootstrap, retention="1s", retention_interval_s=1)
    bridge = start_bridge(config)
    stop_writing = threading.Event()
    written = [200]

    def writer() -> None:
        while not stop_writing.is_set():
            insert_events(postgres_url, 20, start=written[0])
            written[0] += 20
            time.sleep(0.05)

    thread = threading.Thread(target=writer)
    try:
        wait_until(lambda: bridge.daemon.ready, 30, "the bridge to lead")
        thread.start()
        wait_until(lambda: bridge.daemon.retention_passes >= 3, 60, "three retention passes")
        stop_writing.set()
        thread.join()
        head = head_seq(postgres_url)
        wait_until(lambda: bridge.daemon.tracker.watermark >= head, 60, "the bridge to publish every event")
        deleted = bridge.daemon.metrics.retention_deleted._value.get()
    finally:
        stop_writing.set()
        if thread.is_alive():
            thread.join()
        assert bridge.stop() == 0
    assert deleted >= 200, f"retention deleted only {deleted} rows"
    engine = create_engine(postgres_url)
    with engine.connect() as conn:
        remaining = conn.execute(text("SELECT count(*) FROM domain_events")).scalar()
    engine.dispose()
    assert remaining == head - deleted
    seqs = {int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, config.topic_for("order"))}
    assert seqs == set(range(1, head + 1)), "every event reached Kafka: retention deleted nothing unpublished"
