"""`outbox-bridge doctor` breaks nothing and reports everything: a healthy set-up is all ok (exit 0); each
broken dependency (an unmigrated database, a `CACHE 50` sequence, a login without UPDATE, an RF-1 topic on a
3-broker cluster, Kafka down) is reported as failed with its fix, and the command exits 1."""

from __future__ import annotations

import json
import socket
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bridge.config import BridgeConfig
from bridge.doctor import BridgeDoctor, Check, Verdict, doctor_command
from bridge.migrate import upgrade
from tests.support import bridge_config, insert_events, persisted_watermark, running, start_bridge, wait_until

pytestmark = pytest.mark.integration


def _doctor(config: BridgeConfig, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[Check]]:
    code = doctor_command(config, json_output=True)
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] == (code == 0)
    return code, [Check(c["name"], Verdict(c["verdict"]), c["summary"], c["fix"]) for c in report["checks"]]


def _failed(checks: list[Check], name: str) -> list[Check]:
    return [c for c in checks if c.name == name and c.verdict is Verdict.FAILED]


def _execute(url: str, *statements: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for statement in statements:
            conn.execute(text(statement))
    engine.dispose()


def test_a_healthy_bridge_on_a_three_broker_cluster_is_all_ok_and_exits_0(
    postgres_url: str, kafka_cluster3, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(postgres_url)
    insert_events(postgres_url, 20)
    config = bridge_config(postgres_url, kafka_cluster3.bootstrap, replication_factor=3, allow_single_broker=False)
    with running(start_bridge(config)):
        wait_until(lambda: persisted_watermark(postgres_url, config.bridge_name) == 20, 60, "the bridge caught up")
        code, checks = _doctor(config, capsys)
    assert code == 0, checks
    assert {c.verdict for c in checks} == {Verdict.OK}, [c for c in checks if c.verdict is not Verdict.OK]
    names = {c.name for c in checks}
    assert {"database", "schema revision", "never-skip seq path", "privileges", "lease", "watermark", "horizon",
            "retention", "kafka", "topics", "acls"} <= names
    lease = next(c for c in checks if c.name == "lease")
    assert "held by" in lease.summary and " since 20" in lease.summary
    topic = config.topic_for("order")
    assert any(topic in c.summary and "replication factor 3" in c.summary for c in checks if c.name == "topics")
    AdminClient({"bootstrap.servers": kafka_cluster3.bootstrap}).delete_topics([topic])


def test_an_unmigrated_database_fails_naming_outbox_bridge_migrate(
    sqlite_url: str, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, checks = _doctor(bridge_config(sqlite_url, kafka_bootstrap), capsys)
    assert code == 1
    [revision] = _failed(checks, "schema revision")
    assert "not migrated" in revision.summary and "outbox-bridge migrate" in (revision.fix or "")
    assert {c.verdict for c in checks if c.name in ("lease", "watermark")} == {Verdict.SKIPPED}


def test_a_sequence_with_cache_50_fails_naming_the_repair(
    postgres_url: str, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(postgres_url)
    _execute(postgres_url, "ALTER SEQUENCE domain_events_seq_seq CACHE 50")
    code, checks = _doctor(bridge_config(postgres_url, kafka_bootstrap), capsys)
    assert code == 1
    [seq_path] = _failed(checks, "never-skip seq path")
    assert "CACHE 50" in seq_path.summary and "ALTER SEQUENCE domain_events_seq_seq CACHE 1" in (seq_path.fix or "")


def test_a_login_without_update_on_bridge_offsets_fails_with_the_grant(
    postgres_url: str, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(postgres_url)
    role = f"doctor_{uuid.uuid4().hex[:8]}"
    _execute(postgres_url, f"CREATE ROLE {role} LOGIN PASSWORD 'pw'",
             f"GRANT SELECT ON domain_events, bridge_replay_audit, outbox_alembic_version TO {role}",
             f"GRANT UPDATE ON bridge_replay_audit TO {role}", f"GRANT SELECT, INSERT ON bridge_offsets TO {role}")
    try:
        url = make_url(postgres_url).set(username=role, password="pw").render_as_string(hide_password=False)
        code, checks = _doctor(bridge_config(url, kafka_bootstrap, retention="7d"), capsys)
        assert code == 1
        [privileges] = _failed(checks, "privileges")
        assert f"login {role} lacks DELETE on domain_events; UPDATE on bridge_offsets" in privileges.summary
        assert f"GRANT UPDATE ON bridge_offsets TO {role}" in (privileges.fix or "")
    finally:
        _execute(postgres_url, f"DROP OWNED BY {role}", f"DROP ROLE {role}")


def test_a_replication_factor_1_topic_on_a_three_broker_cluster_fails_naming_the_fix(
    sqlite_url: str, kafka_cluster3, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(sqlite_url)
    insert_events(sqlite_url, 3)
    config = bridge_config(sqlite_url, kafka_cluster3.bootstrap, replication_factor=3, allow_single_broker=False)
    topic = config.topic_for("order")
    admin = AdminClient({"bootstrap.servers": kafka_cluster3.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    try:
        code, checks = _doctor(config, capsys)
    finally:
        admin.delete_topics([topic])
    assert code == 1
    [unsafe] = _failed(checks, "topics")
    assert topic in unsafe.summary and "replication.factor is 1, needs 3" in unsafe.summary
    assert "recreate the topic" in (unsafe.fix or "")


def test_kafka_down_fails_in_bounded_time_naming_the_bootstrap_servers(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(sqlite_url)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{sock.getsockname()[1]}"
    started = time.monotonic()
    code, checks = _doctor(bridge_config(sqlite_url, bootstrap), capsys)
    assert time.monotonic() - started < 30
    assert code == 1
    [kafka] = _failed(checks, "kafka")
    assert "make up" in (kafka.fix or "") and "KAFKA_BOOTSTRAP_SERVERS" in (kafka.fix or "")
    assert {c.verdict for c in checks if c.name in ("topics", "acls")} == {Verdict.SKIPPED}
    assert {c.verdict for c in checks if c.name == "database"} == {Verdict.OK}


def test_a_database_that_does_not_answer_is_reported_not_waited_for(sqlite_url: str, kafka_bootstrap: str) -> None:
    with socket.socket() as listener:  # accepts connections, never answers: a hung server
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        config = bridge_config(f"postgresql+psycopg://u:p@127.0.0.1:{port}/db", kafka_bootstrap)
        started = time.monotonic()
        checks = BridgeDoctor(config, timeout_s=3).run()
        assert time.monotonic() - started < 20
    [database] = _failed(checks, "database")
    assert "OUTBOX_DB_URL" in (database.fix or "")


def test_a_login_that_may_not_read_the_revision_is_warned_about_and_still_runs(
    postgres_url: str, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bridge.store.revision import check_migrated

    upgrade(postgres_url)
    role = f"doctor_{uuid.uuid4().hex[:8]}"
    _execute(postgres_url, f"CREATE ROLE {role} LOGIN PASSWORD 'pw'",
             f"GRANT SELECT ON domain_events, bridge_replay_audit, bridge_offsets TO {role}",
             f"GRANT INSERT, UPDATE ON bridge_offsets TO {role}", f"GRANT UPDATE ON bridge_replay_audit TO {role}")
    try:
        url = make_url(postgres_url).set(username=role, password="pw").render_as_string(hide_password=False)
        engine = create_engine(url)
        with engine.connect() as conn:
            check_migrated(conn)  # the tables are there: not refused
            assert conn.execute(text("SELECT count(*) FROM domain_events")).scalar() == 0  # transaction intact
        engine.dispose()
        code, checks = _doctor(bridge_config(url, kafka_bootstrap), capsys)
        revision = next(c for c in checks if c.name == "schema revision")
        assert revision.verdict is Verdict.WARNING and "SELECT on outbox_alembic_version" in (revision.fix or "")
        [privileges] = _failed(checks, "privileges")
        assert "SELECT on outbox_alembic_version" in privileges.summary
        assert code == 1
    finally:
        _execute(postgres_url, f"DROP OWNED BY {role}", f"DROP ROLE {role}")
