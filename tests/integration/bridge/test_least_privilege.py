"""The bridge runs as the role `outbox-bridge grants` makes, on a real PostgreSQL: the writer appends as the
writer role, the bridge publishes everything as the bridge role, and neither can do more than that."""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import ProgrammingError

from bridge.cli import main
from bridge.migrate import upgrade
from bridge.store.engine import make_engine
from bridge.store.privileges import excess_rights
from tests.support import (
    Roles,
    bridge_config,
    head_seq,
    insert_events,
    least_privilege_roles,
    login_url,
    persisted_watermark,
    read_topic,
    running,
    start_bridge,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

WARNING = "it needs far fewer rights"


@pytest.fixture()
def roles(postgres_url: str) -> Iterator[Roles]:
    upgrade(postgres_url)
    with least_privilege_roles(postgres_url) as made:
        yield made


def _refused(url: str, statement: str) -> str:
    engine = create_engine(url)
    try:
        with engine.begin() as conn, pytest.raises(ProgrammingError) as refused:
            conn.execute(text(statement))
        return str(refused.value.orig)
    finally:
        engine.dispose()


def test_the_bridge_role_publishes_everything_the_writer_role_appends_and_can_do_nothing_else(
    roles: Roles, kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    insert_events(roles.writer_url, 300)
    config = bridge_config(roles.bridge_url, kafka_bootstrap)
    with caplog.at_level(logging.WARNING, logger="bridge.daemon"), running(start_bridge(config)) as bridge:
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 300, 60,
                   "300 events published by the bridge role")
        insert_events(roles.writer_url, 50, start=300)
        wait_until(lambda: bridge.daemon.tracker.watermark == 350, 60, "350 events")
        assert bridge.stop() == 0
    assert not [r for r in caplog.records if WARNING in r.getMessage()], "no warning for a least-privilege role"

    seqs = sorted(int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, config.topic_for("order")))
    assert seqs == list(range(1, 351)) and head_seq(roles.admin_url) == 350, "every event, exactly once"

    # The operator's commands work as the bridge role too: a rewind writes the replay audit (and its id sequence).
    flags = ["--db-url", roles.bridge_url, "--bootstrap-servers", kafka_bootstrap, "--bridge-name", config.bridge_name]
    assert main(["status", *flags, "--json"]) == 0
    assert main(["replay", *flags, "--from-seq", "341", "--yes", "--json"]) == 0
    assert persisted_watermark(roles.admin_url, config.bridge_name) == 340

    for statement in (
        "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
        "VALUES ('forged', 'order', 'a-1', 'OrderPlaced', '{}')",
        "DELETE FROM domain_events WHERE seq = 1",  # retention is off
        "UPDATE domain_events SET payload = '{}' WHERE seq = 1",
    ):
        assert "permission denied for table domain_events" in _refused(roles.bridge_url, statement)
    assert "must be owner of table domain_events" in _refused(
        roles.bridge_url, "ALTER TABLE domain_events ADD COLUMN extra int")
    assert "must be owner of table bridge_offsets" in _refused(roles.bridge_url, "DROP TABLE bridge_offsets")
    # The writer appends and reads nothing back, the bridge's tables included.
    assert "permission denied for table domain_events" in _refused(roles.writer_url, "SELECT * FROM domain_events")
    assert "permission denied for table bridge_offsets" in _refused(
        roles.writer_url, "UPDATE bridge_offsets SET watermark = 0")


def test_with_retention_granted_the_bridge_role_deletes_what_it_published(roles: Roles, kafka_bootstrap: str) -> None:
    roles.grant("--retention")
    insert_events(roles.writer_url, 100)
    config = bridge_config(roles.bridge_url, kafka_bootstrap, retention="1s", retention_interval_s=1)
    engine = create_engine(roles.admin_url)

    def rows_left() -> int:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM domain_events")).scalar_one())

    try:
        with running(start_bridge(config)) as bridge:
            wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 100, 60,
                       "100 events published")
            wait_until(lambda: rows_left() == 0, 30, "retention to delete the published rows as the bridge role")
            assert bridge.daemon.last_error is None
            assert bridge.stop() == 0
    finally:
        engine.dispose()

    # Turned off again, the same command takes DELETE back.
    roles.grant("--no-retention")
    assert "permission denied" in _refused(roles.bridge_url, "DELETE FROM domain_events")


def test_the_bridge_warns_once_at_start_as_a_superuser_and_names_the_owner_of_domain_events(
    roles: Roles, kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = bridge_config(roles.admin_url, kafka_bootstrap)  # the stack's superuser
    with caplog.at_level(logging.WARNING, logger="bridge.daemon"), running(start_bridge(config)) as bridge:
        wait_until(lambda: bridge.daemon.ready, 30, "the bridge to lead")
        assert bridge.stop() == 0
    warnings = [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "a PostgreSQL superuser" in warnings[0] and "outbox-bridge grants --sql" in warnings[0]

    # The owner: the role that ran the migration in production. Made so here by handing it the table.
    owner = f"owner_{uuid.uuid4().hex[:8]}"
    admin = create_engine(roles.admin_url, isolation_level="AUTOCOMMIT")
    password = secrets.token_hex(12)
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE ROLE {owner} LOGIN PASSWORD '{password}'"))
            conn.execute(text(f"ALTER TABLE domain_events OWNER TO {owner}"))
        engine = make_engine(login_url(roles.admin_url, owner, password))
        with engine.connect() as conn:
            excess = excess_rights(conn)
        engine.dispose()
        assert excess is not None and excess.login == owner and excess.why == "the owner of domain_events"
        engine = make_engine(roles.bridge_url)
        with engine.connect() as conn:
            assert excess_rights(conn) is None
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"REASSIGN OWNED BY {owner} TO CURRENT_USER"))
            conn.execute(text(f"DROP OWNED BY {owner}"))
            conn.execute(text(f"DROP ROLE {owner}"))
        admin.dispose()
