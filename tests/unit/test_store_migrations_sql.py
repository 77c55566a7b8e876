"""The migrations rendered offline (`outbox-bridge migrate --sql`) per dialect, and migrate's errors."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import MetaData, create_engine

from bridge import migrate, schema
from bridge.errors import ConfigurationError

pytestmark = pytest.mark.unit


def table_ddl(ddl: str, table: str) -> str:
    found = re.search(rf"CREATE TABLE {table} \((.*?)\n\);", ddl, re.DOTALL)
    assert found, f"no CREATE TABLE {table} in:\n{ddl}"
    return found.group(1)


def test_sql_server_ddl_compiles_without_a_driver_or_a_server() -> None:
    ddl = migrate.sql("mssql+pyodbc://user:secret@db.example/outbox?driver=ODBC+Driver+18+for+SQL+Server")
    events = table_ddl(ddl, "domain_events")
    assert "seq BIGINT NOT NULL IDENTITY(1,1)" in events
    assert "CONSTRAINT pk_domain_events PRIMARY KEY (seq)" in events
    assert "row_version ROWVERSION NOT NULL" in events
    assert "CONSTRAINT uq_domain_events_event_id UNIQUE (event_id)" in events
    assert "payload NVARCHAR(max) NOT NULL" in events
    assert "headers NVARCHAR(max) NULL" in events
    assert "occurred_at DATETIMEOFFSET NOT NULL DEFAULT SYSUTCDATETIME()" in events
    assert "schema_version INTEGER NOT NULL DEFAULT 1" in events
    assert "CREATE INDEX ix_domain_events_row_version ON domain_events (row_version)" in ddl
    for table in ("bridge_offsets", "bridge_replay_audit", "bridge_holes", "outbox_alembic_version"):
        table_ddl(ddl, table)
    assert "epoch BIGINT NOT NULL DEFAULT 0" in table_ddl(ddl, "bridge_offsets")
    assert "id BIGINT NOT NULL IDENTITY" in table_ddl(ddl, "bridge_replay_audit")
    assert "PRIMARY KEY (bridge_name, seq)" in table_ddl(ddl, "bridge_holes")
    assert "xid8" not in ddl.lower()
    assert "NTEXT" not in ddl and " TEXT" not in ddl  # deprecated large types
    assert "secret" not in ddl


def test_postgresql_ddl_takes_the_xid_before_the_seq_and_stores_payload_as_text() -> None:
    ddl = migrate.sql("postgresql")
    events = table_ddl(ddl, "domain_events")
    assert "seq BIGINT DEFAULT outbox_next_seq() NOT NULL" in events
    assert f"DEFAULT {schema.SEQ_FUNCTION}()" in events and f"CREATE SEQUENCE {schema.SEQ_SEQUENCE} " in ddl
    assert "BIGSERIAL" not in events and "IDENTITY" not in events
    assert "txid XID8 DEFAULT pg_current_xact_id() NOT NULL" in events
    assert "payload TEXT NOT NULL" in events
    assert "occurred_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL" in events
    assert "jsonb" not in ddl.lower()
    assert re.search(r"CREATE SEQUENCE domain_events_seq_seq .*CACHE 1", ddl)
    function = ddl[ddl.index("CREATE FUNCTION outbox_next_seq()") :]
    assert function.index("PERFORM pg_current_xact_id();") < function.index("nextval('domain_events_seq_seq')")
    assert "ALTER SEQUENCE domain_events_seq_seq OWNED BY domain_events.seq" in ddl
    # The sequence and function exist before the table that uses them.
    assert ddl.index("CREATE FUNCTION outbox_next_seq()") < ddl.index("CREATE TABLE domain_events")
    assert f"pg_notify('{schema.NOTIFY_CHANNEL}', '')" in ddl
    assert "AFTER INSERT ON domain_events\nFOR EACH STATEMENT" in ddl
    assert ddl.strip().startswith("BEGIN;") and ddl.strip().endswith("COMMIT;")


def test_sqlite_ddl_never_reuses_a_seq_and_defaults_to_iso_8601_utc_text() -> None:
    ddl = migrate.sql("sqlite")
    events = table_ddl(ddl, "domain_events")
    assert "seq INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT" in events
    assert "occurred_at TEXT DEFAULT (strftime('%Y-%m-%dT%H:%M:%f000Z', 'now')) NOT NULL" in events
    assert "payload TEXT NOT NULL" in events
    assert "txid" not in events and "row_version" not in events


def test_downgrade_sql_drops_everything_the_upgrade_created() -> None:
    ddl = migrate.sql("postgresql", "base", downgrade=True)
    for table in ("domain_events", "bridge_offsets", "bridge_replay_audit", "bridge_holes"):
        assert f"DROP TABLE {table};" in ddl
    assert "DROP FUNCTION outbox_notify()" in ddl
    assert "DROP FUNCTION outbox_next_seq()" in ddl
    assert ddl.index("DROP TABLE domain_events") < ddl.index("DROP FUNCTION outbox_next_seq()")


def test_head_is_the_first_revision() -> None:
    assert migrate.head() == "0001"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "no database URL: set OUTBOX_DB_URL"),
        ("not a url", "is not a SQLAlchemy URL"),
        ("mysql+pymysql://u:hunter2@h/db", "support sqlite, postgresql, mssql, not 'mysql'"),
    ],
)
def test_bad_urls_are_configuration_errors_that_name_the_fix_and_hide_passwords(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        migrate.upgrade(url)
    assert "hunter2" not in str(caught.value)
    with pytest.raises(ConfigurationError, match=message):
        migrate.sql(url or " ")


def test_a_missing_driver_says_what_to_install() -> None:
    try:
        import pyodbc  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pyodbc is installed here, so the driver is not missing")
    with pytest.raises(ConfigurationError, match=r"outbox-bridge\[mssql\]") as caught:
        migrate.upgrade("mssql+pyodbc://sa:hunter2@127.0.0.1:1/outbox")
    assert "hunter2" not in str(caught.value)


def test_an_unknown_revision_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="revision 'nope'"):
        migrate.sql("sqlite", "nope")


def test_migrate_command_prints_sql_or_reports_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert migrate.migrate_command("mssql+pyodbc://", sql=True, revision="head", downgrade=False) == 0
    assert "IDENTITY(1,1)" in capsys.readouterr().out
    assert migrate.migrate_command("oracle://x", sql=False, revision="head", downgrade=False) == 2
    assert "not 'oracle'" in capsys.readouterr().err


def test_masked_hides_the_password_in_urls_that_do_not_parse() -> None:
    assert migrate.masked("postgresql://me:s3cret@host/db?x") == "postgresql://me:***@host/db?x"


def test_create_all_is_refused_in_favour_of_the_migrations() -> None:
    engine = create_engine("sqlite://")
    with pytest.raises(ConfigurationError, match=r"bridge\.migrate\.upgrade"):
        schema.metadata.create_all(engine)
    MetaData().create_all(engine)  # other metadata is unaffected
