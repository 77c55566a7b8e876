"""The bridge refuses, exit 2, to publish from an outbox whose seq path no longer takes the horizon stamp
first (a sequence cache, a plain nextval default; on SQLite a table without AUTOINCREMENT), naming what
changed and the repair; an intact outbox passes the same check."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from bridge.cli import main
from bridge.daemon import EXIT_DAMAGED, build_daemon
from bridge.migrate import upgrade
from bridge.store.invariants import never_skip_problems
from tests.support import bridge_config

pytestmark = pytest.mark.integration


def _problems(url: str) -> list[str]:
    engine = create_engine(url)
    with engine.connect() as conn:
        problems = never_skip_problems(conn)
    engine.dispose()
    return problems


def _alter(url: str, statement: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(statement))
    engine.dispose()


@pytest.mark.parametrize("url_fixture", ["postgres_url", "sqlite_url"])
def test_a_migrated_outbox_passes_the_check(url_fixture: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(url_fixture)
    upgrade(url)
    assert _problems(url) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("ALTER SEQUENCE domain_events_seq_seq CACHE 20", "ALTER SEQUENCE domain_events_seq_seq CACHE 1"),
        ("ALTER TABLE domain_events ALTER COLUMN seq SET DEFAULT nextval('domain_events_seq_seq')",
         "SET DEFAULT outbox_next_seq()"),
    ],
)
def test_a_tidied_postgresql_outbox_is_refused_with_exit_2_naming_the_repair(
    postgres_url: str, kafka_bootstrap: str, change: str, named: str
) -> None:
    upgrade(postgres_url)
    _alter(postgres_url, change)
    daemon = build_daemon(bridge_config(postgres_url, kafka_bootstrap))
    assert daemon.run() == EXIT_DAMAGED
    assert named in (daemon.last_error or "")
    assert daemon.metrics.is_leader._value.get() == 0  # it never took the lease


def test_the_cli_exits_2_on_a_sqlite_outbox_without_autoincrement(
    sqlite_url: str, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    upgrade(sqlite_url)
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'domain_events'")).scalar_one()
        conn.execute(text("ALTER TABLE domain_events RENAME TO old_events"))
        conn.execute(text(ddl.replace("AUTOINCREMENT", "")))
    engine.dispose()
    monkeypatch.setenv("OUTBOX_DB_URL", sqlite_url)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("BRIDGE_ALLOW_SINGLE_BROKER", "true")
    monkeypatch.setenv("BRIDGE_REPLICATION_FACTOR", "1")
    monkeypatch.setenv("BRIDGE_METRICS_PORT", "0")
    assert main(["run"]) == 2
    assert "AUTOINCREMENT" in capsys.readouterr().err
