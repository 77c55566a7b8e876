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
    events = table_ddl(ddl, "domain_events")  # as revision 0001 creates it; 0002 rebuilds it below
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


def statements(ddl: str) -> list[str]:
    """The batches of an offline SQL Server script, in order (Alembic separates them with GO)."""
    return [part.strip().rstrip(";").strip() for part in ddl.split("\nGO\n") if part.strip()]


def index_of(batches: list[str], start: str) -> int:
    found = [i for i, batch in enumerate(batches) if batch.startswith(start) or f"\n{start}" in batch]
    assert len(found) == 1, f"expected one batch starting {start!r}, found {len(found)}"
    return found[0]


def sql_server_0002(downgrade: bool = False) -> str:
    return migrate.sql("mssql", "0002:0001" if downgrade else "0001:0002", downgrade=downgrade)


def trigger_body() -> str:
    """The trigger's T-SQL without its comments."""
    ddl = sql_server_0002()
    trigger = ddl[ddl.index(f"CREATE TRIGGER {schema.MSSQL_SEQ_TRIGGER}") :].split("\nGO\n")[0]
    return "\n".join(line.split("--")[0].rstrip() for line in trigger.splitlines() if line.split("--")[0].strip())


def test_sql_server_trigger_takes_its_ticket_before_it_draws_a_seq() -> None:
    body = trigger_body()
    assert body.startswith(f"CREATE TRIGGER {schema.MSSQL_SEQ_TRIGGER} ON domain_events\nINSTEAD OF INSERT")
    ticket = body.index(f"INSERT INTO {schema.MSSQL_TICKETS} DEFAULT VALUES")
    draw = body.index(f"NEXT VALUE FOR {schema.MSSQL_SEQ_SEQUENCE}")
    insert = body.index("INSERT INTO domain_events (seq,")
    assert ticket < insert < draw
    # Exactly one draw, and no earlier statement of the trigger draws or reads a seq.
    assert body.count("NEXT VALUE FOR") == 1
    assert "i.seq" not in body  # a client-supplied seq is ignored
    # Every inserted row of the statement gets its seq from that one INSERT ... SELECT after the ticket.
    assert "FROM inserted AS i" in body[draw:]


def test_sql_server_trigger_keeps_its_own_tickets_until_its_transaction_ends() -> None:
    body = trigger_body()
    # The ticket is never updated, and only this session's tickets below the horizon are deleted:
    # the transaction's own are at or above MIN_ACTIVE_ROWVERSION() while it is open.
    assert f"UPDATE {schema.MSSQL_TICKETS}" not in body
    [delete] = [line for line in body.splitlines() if f"FROM {schema.MSSQL_TICKETS}" in line]
    cleanup = body[body.index(delete) :]
    assert "WHERE session_id = @@SPID AND stamped < MIN_ACTIVE_ROWVERSION()" in cleanup
    assert body.index("NEXT VALUE FOR") < body.index(delete)
    assert "SET NOCOUNT ON" in body and "SET ROWCOUNT 0" in body


def test_sql_server_trigger_inserts_every_column_but_the_rowversion_and_fills_defaults() -> None:
    body = trigger_body()
    insert = body[body.index("INSERT INTO domain_events (") :]
    columns = insert[insert.index("(") + 1 : insert.index(")")].split(", ")
    expected = [c.name for c in schema.domain_events.columns] + [schema.HORIZON_COLUMNS["mssql"]]
    assert columns == [name for name in expected if name != "row_version"]
    assert "COALESCE(i.occurred_at, SYSUTCDATETIME())" in insert
    assert "COALESCE(i.schema_version, 1)" in insert
    # Seqs within one multi-row statement follow occurred_at, then event_id.
    assert "OVER (ORDER BY i.occurred_at, i.event_id)" in insert


def test_sql_server_0002_rebuilds_domain_events_with_the_same_columns_but_no_identity() -> None:
    before = table_ddl(migrate.sql("mssql", "0001"), "domain_events")
    after = table_ddl(sql_server_0002(), "domain_events")
    assert "IDENTITY" not in after
    # SWITCH moves the rows only between tables with the same columns, in the same order, and the
    # same indexes; only the seq column may differ (IDENTITY and the placeholder default).
    assert after.replace("seq BIGINT NOT NULL DEFAULT 0", "seq BIGINT NOT NULL IDENTITY(1,1)") == before
    ddl = sql_server_0002()
    assert ddl.count("CREATE INDEX ix_domain_events_row_version ON domain_events (row_version)") == 1
    tickets = table_ddl(ddl, schema.MSSQL_TICKETS)
    assert "session_id SMALLINT NOT NULL DEFAULT @@SPID" in tickets
    assert "stamped ROWVERSION NOT NULL" in tickets
    assert f"ALTER TABLE {schema.MSSQL_TICKETS} SET (LOCK_ESCALATION = DISABLE)" in ddl


def test_sql_server_0002_switches_the_rows_before_it_drops_anything_and_never_reuses_a_seq() -> None:
    batches = statements(sql_server_0002())
    steps = [
        "EXEC sp_rename 'domain_events', domain_events_0001",
        "CREATE TABLE domain_events (",
        "ALTER TABLE domain_events_0001 SWITCH TO domain_events",
        "EXEC sp_executesql @ddl",  # CREATE SEQUENCE
        "IF @grants IS NOT NULL EXEC sp_executesql @grants",
        "DROP TABLE domain_events_0001",
        f"ALTER TABLE domain_events WITH CHECK ADD CONSTRAINT {schema.MSSQL_SEQ_CHECK} CHECK (seq > 0)",
        f"CREATE TABLE {schema.MSSQL_TICKETS} (",
        f"CREATE TRIGGER {schema.MSSQL_SEQ_TRIGGER} ",
    ]
    positions = [index_of(batches, step) for step in steps]
    assert positions == sorted(positions)
    sequence = batches[positions[3]]
    # Starts above the highest IDENTITY value ever handed out (even to a rolled-back row) and the
    # highest seq present; never cycles, never goes below 1.
    assert "CONVERT(BIGINT, last_value) FROM sys.identity_columns" in sequence
    assert "OBJECT_ID(N'domain_events_0001')" in sequence
    assert "MAX(seq) FROM domain_events" in sequence
    assert "AS BIGINT START WITH '\n    + CONVERT(NVARCHAR(20), @drawn + 1)" in sequence
    assert "INCREMENT BY 1 MINVALUE 1 NO CYCLE CACHE" in sequence
    # The old constraint names are moved aside, so the new table has the names the writer relies on.
    for old, new in (("pk_domain_events", "pk_domain_events_0001"),
                     (schema.EVENT_ID_UNIQUE, "uq_domain_events_0001_event_id")):
        rename = batches[index_of(batches, f"EXEC sp_rename @constraint, N'{new}'")]
        assert f"+ N'.{old}'" in rename
    assert "OBJECT_ID(N'domain_events_0001')" in batches[positions[4]]


def test_sql_server_0002_downgrade_restores_the_identity_above_every_drawn_seq() -> None:
    batches = statements(sql_server_0002(downgrade=True))
    steps = [
        f"DROP TRIGGER {schema.MSSQL_SEQ_TRIGGER}",
        f"DROP TABLE {schema.MSSQL_TICKETS}",
        f"ALTER TABLE domain_events DROP CONSTRAINT {schema.MSSQL_SEQ_CHECK}",
        "EXEC sp_rename 'domain_events', domain_events_0002",
        "CREATE TABLE domain_events (",
        "ALTER TABLE domain_events_0002 SWITCH TO domain_events",
        "DBCC CHECKIDENT (N'domain_events', RESEED, @next)",
        "IF @grants IS NOT NULL EXEC sp_executesql @grants",
        "DROP TABLE domain_events_0002",
        f"DROP SEQUENCE {schema.MSSQL_SEQ_SEQUENCE}",
    ]
    positions = [index_of(batches, step) for step in steps]
    assert positions == sorted(positions)
    reseed = batches[positions[6]]
    assert "CONVERT(BIGINT, current_value) FROM sys.sequences" in reseed
    assert "MAX(seq) FROM domain_events" in reseed
    restored = table_ddl(sql_server_0002(downgrade=True), "domain_events")
    assert restored == table_ddl(migrate.sql("mssql", "0001"), "domain_events")


def test_revision_0002_changes_nothing_on_sqlite_and_postgresql() -> None:
    for dialect in ("sqlite", "postgresql"):
        for ddl in (migrate.sql(dialect, "0001:0002"), migrate.sql(dialect, "0002:0001", downgrade=True)):
            bookkeeping = ("--", "BEGIN", "COMMIT", "UPDATE outbox_alembic_version")
            changes = [line for line in ddl.splitlines() if line.strip() and not line.startswith(bookkeeping)]
            assert changes == [], f"{dialect}: {changes}"


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


def test_0003_drops_the_holes_table_nothing_wrote() -> None:
    for dialect in ("sqlite", "postgresql", "mssql"):
        ddl = migrate.sql(dialect, "0002:0003")
        assert "DROP TABLE bridge_holes" in ddl


def test_head_0004_adds_dead_letters_deletions_and_retired_names_and_records_what_is_gone() -> None:
    assert migrate.head() == "0004"
    last_drawn = {"sqlite": "FROM sqlite_sequence WHERE name = 'domain_events'",
                  "postgresql": "FROM domain_events_seq_seq",
                  "mssql": "last_used_value AS BIGINT) FROM sys.sequences WHERE name = 'domain_events_seq'"}
    for dialect, drawn in last_drawn.items():
        ddl = migrate.sql(dialect, "0003:0004")
        assert "PRIMARY KEY (bridge_name, seq)" in table_ddl(ddl, "bridge_dead_letters")
        assert "through_seq BIGINT NOT NULL" in table_ddl(ddl, "bridge_deletions")
        assert "ADD COLUMN retired_at" in ddl or "ADD retired_at" in ddl
        # Offline too: the record of rows an older release deleted is computed by the script itself.
        seeding = ddl[ddl.index("INSERT INTO bridge_deletions"):]
        assert "SELECT MIN(seq) - 1 FROM domain_events" in seeding and drawn in seeding
        down = migrate.sql(dialect, "0004:0003", downgrade=True)
        assert "DROP TABLE bridge_dead_letters" in down and "DROP TABLE bridge_deletions" in down


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
    assert f"CREATE TRIGGER {schema.MSSQL_SEQ_TRIGGER}" in capsys.readouterr().out
    assert migrate.migrate_command("oracle://x", sql=False, revision="head", downgrade=False) == 2
    assert "not 'oracle'" in capsys.readouterr().err


def test_masked_hides_the_password_in_urls_that_do_not_parse() -> None:
    assert migrate.masked("postgresql://me:s3cret@host/db?x") == "postgresql://me:***@host/db?x"


def test_create_all_is_refused_in_favour_of_the_migrations() -> None:
    engine = create_engine("sqlite://")
    with pytest.raises(ConfigurationError, match=r"bridge\.migrate\.upgrade"):
        schema.metadata.create_all(engine)
    MetaData().create_all(engine)  # other metadata is unaffected
