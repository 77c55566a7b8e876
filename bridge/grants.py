"""Least-privilege roles for the outbox: an application writer and the bridge, as SQL for a DBA to run.

- The writer may INSERT into `domain_events` and use what the seq path needs: on PostgreSQL the
  sequence and `outbox_next_seq()` (the column default runs with the writer's rights); on SQL Server
  nothing else, because the INSTEAD OF INSERT trigger, the ticket table and the SEQUENCE of revision
  0002 share the table's owner and ownership chaining covers them.
- The bridge may read `domain_events` (DELETE only when retention is on), read and write its own
  tables, and read what its start-up checks and the horizon-holder query read.

Every object's grants are revoked first, so applying the output again after a change (retention
turned off) leaves exactly what it prints. The roles are created without a login: give them to login
roles (`GRANT outbox_bridge TO bridge_login`, `ALTER ROLE ... ADD MEMBER`) or turn them into logins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from sqlalchemy import text
from sqlalchemy.engine import URL

from bridge.errors import ConfigurationError
from bridge.migrate import VERSION_TABLE
from bridge.schema import MSSQL_SEQ_SEQUENCE, MSSQL_TICKETS, SEQ_FUNCTION, SEQ_SEQUENCE

DIALECTS: Final = ("postgresql", "mssql")
DEFAULT_WRITER: Final = "outbox_writer"
DEFAULT_BRIDGE: Final = "outbox_bridge"
DEFAULT_SCHEMA: Final = {"postgresql": "public", "mssql": "dbo"}
#: The sequences behind `bridge_replay_audit.id` and `bridge_deletions.id` (BIGSERIALs on PostgreSQL).
AUDIT_ID_SEQUENCE: Final = "bridge_replay_audit_id_seq"
DELETIONS_ID_SEQUENCE: Final = "bridge_deletions_id_seq"
#: The bridge's own tables: the watermark and lease, the replay audit, dead letters and the record of deletions.
BRIDGE_TABLES: Final = ("bridge_offsets", "bridge_replay_audit", "bridge_dead_letters", "bridge_deletions")
#: Each running instance's state: an instance adds, updates and (stopping) removes its own row.
INSTANCES_TABLE: Final = "bridge_instances"

# Unquoted identifiers only, so a name means the same in a GRANT, a catalog lookup and a login string.
_NAME = {"postgresql": re.compile(r"[a-z_][a-z0-9_]{0,62}"), "mssql": re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")}


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement, and why the role needs it (printed as a comment above it)."""

    sql: str
    why: str = ""


@dataclass(frozen=True, slots=True)
class RolePlan:
    """Who gets what: the role names, the schema of the outbox, and whether retention deletes rows."""

    dialect: str
    writer: str = DEFAULT_WRITER
    bridge: str = DEFAULT_BRIDGE
    schema: str | None = None
    retention: bool = False

    def __post_init__(self) -> None:
        if self.dialect not in DIALECTS:
            raise ConfigurationError(
                f"grants are for PostgreSQL and SQL Server, not {self.dialect!r}: point OUTBOX_DB_URL at one of "
                "them or pass --dialect postgresql|mssql (SQLite has no roles; file permissions guard it)"
            )
        pattern = _NAME[self.dialect]
        for option, value in (("--writer-role", self.writer), ("--bridge-role", self.bridge),
                              ("--schema", self.schema_name)):
            if not pattern.fullmatch(value):
                raise ConfigurationError(
                    f"{option} {value!r} is not a plain {self.dialect} identifier; use letters, digits and "
                    f"underscores ({pattern.pattern})"
                )
        if self.writer == self.bridge:
            raise ConfigurationError(
                f"--writer-role and --bridge-role are both {self.writer!r}: give the application and the bridge "
                "separate roles, so neither gets the other's rights"
            )

    @property
    def schema_name(self) -> str:
        return self.schema or DEFAULT_SCHEMA[self.dialect]


def dialect_of(url: str | URL) -> str:
    """The dialect name of a SQLAlchemy URL (`postgresql+psycopg://...` -> `postgresql`)."""
    from sqlalchemy.engine import make_url

    return make_url(url).get_backend_name()


def statements(plan: RolePlan) -> list[Statement]:
    """The statements that create the two roles and give each exactly what it needs."""
    return _postgres(plan) if plan.dialect == "postgresql" else _mssql(plan)


def _postgres(plan: RolePlan) -> list[Statement]:
    s, writer, bridge = plan.schema_name, plan.writer, plan.bridge
    events = f"{s}.domain_events"
    own = ", ".join(f"{s}.{table}" for table in (*BRIDGE_TABLES, INSTANCES_TABLE))
    tables = ", ".join(f"{s}.{table}" for table in BRIDGE_TABLES)
    out = [
        Statement(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN "
                  f"CREATE ROLE {role} NOLOGIN; END IF; END $$",
                  f"the {what} role, without a login: GRANT {role} TO <login>, or ALTER ROLE {role} LOGIN PASSWORD")
        for role, what in ((writer, "application writer"), (bridge, "bridge"))
    ]
    out += [
        Statement(f"DO $$ BEGIN EXECUTE format('GRANT CONNECT ON DATABASE %I TO {writer}, {bridge}', "
                  "current_database()); END $$", "both connect to this database"),
        Statement(f"GRANT USAGE ON SCHEMA {s} TO {writer}, {bridge}", "both see the outbox's schema"),
        # Exactly what follows, whatever was granted before (e.g. DELETE while retention was on).
        Statement(f"REVOKE ALL ON TABLE {events}, {own} FROM {writer}, {bridge}",
                  "start from nothing, so the grants below are exactly what each has"),
        Statement(f"REVOKE ALL ON SEQUENCE {s}.{SEQ_SEQUENCE}, {s}.{AUDIT_ID_SEQUENCE}, {s}.{DELETIONS_ID_SEQUENCE} "
                  f"FROM {writer}, {bridge}"),
        Statement(f"GRANT INSERT ON TABLE {events} TO {writer}", "writer: append events, nothing else"),
        Statement(f"GRANT USAGE ON SEQUENCE {s}.{SEQ_SEQUENCE} TO {writer}",
                  f"writer: seq's default {SEQ_FUNCTION}() calls nextval() with the writer's rights"),
        Statement(f"GRANT EXECUTE ON FUNCTION {s}.{SEQ_FUNCTION}() TO {writer}",
                  "writer: the function that takes the transaction id before the seq"),
        Statement(f"GRANT SELECT ON TABLE {events} TO {bridge}",
                  "bridge: read the outbox (the never-skip check also reads its column default; "
                  "pg_sequences, pg_stat_activity and pg_prepared_xacts need no grant)"),
    ]
    if plan.retention:
        out.append(Statement(f"GRANT DELETE ON TABLE {events} TO {bridge}",
                             "bridge: retention (BRIDGE_RETENTION, outbox-bridge cleanup) deletes published rows"))
    out += [
        Statement(f"GRANT SELECT, INSERT, UPDATE ON TABLE {tables} TO {bridge}",
                  "bridge: its watermark and lease, the replay audit, its dead letters, and the record of what "
                  "retention deleted (read by every bridge name before it leads)"),
        Statement(f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {s}.{INSTANCES_TABLE} TO {bridge}",
                  "bridge: each instance's state (starting, standing by, leading), removed when it stops"),
        Statement(f"GRANT USAGE ON SEQUENCE {s}.{AUDIT_ID_SEQUENCE}, {s}.{DELETIONS_ID_SEQUENCE} TO {bridge}",
                  "bridge: ids of replay audit rows (outbox-bridge replay) and of deletion runs (retention)"),
        Statement(f"GRANT SELECT ON TABLE {s}.{VERSION_TABLE} TO {bridge}",
                  "bridge: the migration revision it checks at start (and `doctor` reports)"),
    ]
    return out


def _mssql(plan: RolePlan) -> list[Statement]:
    s, writer, bridge = plan.schema_name, f"[{plan.writer}]", f"[{plan.bridge}]"
    events = f"OBJECT::[{s}].[domain_events]"
    every = "SELECT, INSERT, UPDATE, DELETE, REFERENCES, ALTER, VIEW DEFINITION"
    objects = (events, f"OBJECT::[{s}].[{MSSQL_TICKETS}]",
               *(f"OBJECT::[{s}].[{table}]" for table in (*BRIDGE_TABLES, INSTANCES_TABLE)))
    out = [
        Statement(f"IF DATABASE_PRINCIPAL_ID(N'{role}') IS NULL CREATE ROLE [{role}]",
                  f"the {what} role: ALTER ROLE [{role}] ADD MEMBER <database user>")
        for role, what in ((plan.writer, "application writer"), (plan.bridge, "bridge"))
    ]
    out += [Statement(f"REVOKE {every} ON {obj} FROM {writer}, {bridge}",
                      "start from nothing, so the grants below are exactly what each has" if n == 0 else "")
            for n, obj in enumerate(objects)]
    out += [
        Statement(f"REVOKE UPDATE, REFERENCES, ALTER, VIEW DEFINITION ON OBJECT::[{s}].[{MSSQL_SEQ_SEQUENCE}] "
                  f"FROM {writer}, {bridge}"),
        Statement(f"GRANT INSERT ON {events} TO {writer}",
                  f"writer: append events. The INSTEAD OF INSERT trigger takes a ticket in {MSSQL_TICKETS}, draws "
                  f"from the SEQUENCE {MSSQL_SEQ_SEQUENCE} and inserts the row; trigger, tables and sequence share "
                  "one owner, so ownership chaining covers them (keep it so: do not change one object's owner)"),
        Statement(f"GRANT SELECT, VIEW DEFINITION ON {events} TO {bridge}",
                  "bridge: read the outbox; the never-skip check reads its trigger, identity and constraints"),
        Statement(f"GRANT VIEW DEFINITION ON OBJECT::[{s}].[{MSSQL_SEQ_SEQUENCE}] TO {bridge}",
                  "bridge: the never-skip check looks the sequence up in sys.sequences"),
        Statement(f"GRANT SELECT ON OBJECT::[{s}].[{MSSQL_TICKETS}] TO {bridge}",
                  "bridge: names the session whose ticket holds MIN_ACTIVE_ROWVERSION() back"),
    ]
    if plan.retention:
        out.append(Statement(f"GRANT DELETE ON {events} TO {bridge}",
                             "bridge: retention (BRIDGE_RETENTION, outbox-bridge cleanup) deletes published rows"))
    out += [
        Statement(f"GRANT SELECT, INSERT, UPDATE ON OBJECT::[{s}].[{table}] TO {bridge}",
                  "bridge: its watermark and lease, the replay audit, its dead letters, and the record of what "
                  "retention deleted" if n == 0 else "")
        for n, table in enumerate(BRIDGE_TABLES)
    ]
    out.append(Statement(f"GRANT SELECT, INSERT, UPDATE, DELETE ON OBJECT::[{s}].[{INSTANCES_TABLE}] TO {bridge}",
                         "bridge: each instance's state (starting, standing by, leading), removed when it stops"))
    out.append(Statement(f"GRANT SELECT ON OBJECT::[{s}].[{VERSION_TABLE}] TO {bridge}",
                         "bridge: the migration revision it checks at start (and `doctor` reports)"))
    return out


def render(plan: RolePlan) -> str:
    """The statements as a script: `;`-terminated for psql, `GO`-separated batches for sqlcmd."""
    where = f"schema {plan.schema_name}"
    lines = [
        f"-- outbox-bridge grants: least-privilege roles for the outbox ({plan.dialect}, {where}).",
        "-- Run as the outbox's owner (who ran `outbox-bridge migrate`), after the migrations; run again after",
        "-- every migration and whenever retention is turned on or off. "
        f"Retention: {'on (DELETE granted)' if plan.retention else 'off (no DELETE)'}.",
    ]
    if plan.dialect == "mssql":
        lines += [
            "-- Optional, in master: GRANT VIEW SERVER STATE TO <bridge login>; without it the bridge names only the",
            "-- session id of a transaction that holds the horizon back (and says so), not its program and host.",
        ]
    else:
        lines += [
            f"-- Optional: GRANT pg_read_all_stats TO {plan.bridge}; without it the bridge names the pid and xid of a",
            "-- transaction that holds the horizon back, not its query, client and start (those of other roles).",
        ]
    terminator = "\nGO" if plan.dialect == "mssql" else ";"
    for statement in statements(plan):
        lines.append("")
        if statement.why:
            lines.append(f"-- {statement.why}")
        lines.append(statement.sql + terminator)
    return "\n".join(lines) + "\n"


def apply(url: str, plan: RolePlan) -> int:
    """Run the statements on the database at `url` in one transaction; returns how many ran."""
    from bridge.migrate import connected

    if dialect_of(url) != plan.dialect:
        raise ConfigurationError(
            f"--dialect {plan.dialect} but OUTBOX_DB_URL is a {dialect_of(url)} URL: drop --dialect, or use --sql"
        )
    todo = statements(plan)
    with connected(url, "applying the outbox grants") as conn:
        for statement in todo:
            conn.execute(text(statement.sql))
    return len(todo)
