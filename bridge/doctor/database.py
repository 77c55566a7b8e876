"""The doctor's database checks: reachable, at the schema revision this bridge needs, the never-skip seq path
intact, and the login holding the privileges the bridge uses.

They learn whether the database answers (`reachable`) and whether its outbox tables can be used (`migrated`):
every later check that reads the outbox waits for both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine, make_url

from bridge.config import BridgeConfig
from bridge.doctor.checklist import Check, Verdict
from bridge.store.access import grant_statements, login, missing_privileges
from bridge.store.engine import make_engine
from bridge.store.invariants import never_skip_problems
from bridge.store.revision import RevisionUnreadable, revision_problem, schema_revision


class OutboxDatabase:
    """The outbox database as the doctor reaches it: one engine, made on first use, whose PostgreSQL
    connections give up after `connect_timeout_s` (a check's time would otherwise go on the connection)."""

    def __init__(self, url: SecretStr, connect_timeout_s: int) -> None:
        self._url = url
        self._connect_timeout_s = connect_timeout_s
        self._engine: Engine | None = None

    def engine(self) -> Engine:
        if self._engine is None:
            url = make_url(self._url.get_secret_value())
            if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
                url = url.update_query_dict({"connect_timeout": str(self._connect_timeout_s)})
            self._engine = make_engine(url.render_as_string(hide_password=False))
        return self._engine

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self.engine().connect() as conn:
            yield conn

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()


class DatabaseChecks:
    """The database's checks, in order; each tells what later checks may rely on."""

    def __init__(self, config: BridgeConfig, outbox: OutboxDatabase) -> None:
        self.config = config
        self.outbox = outbox
        #: The server answered.
        self.reachable = False
        #: The outbox tables are there at a revision this bridge can use.
        self.migrated = False

    def database(self) -> list[Check]:
        with self.outbox.connect() as conn:
            version = _server_version(conn)
        self.reachable = True
        return [Check("database", Verdict.OK, f"reachable: {self.config.database.masked_url} ({version})")]

    def revision(self) -> list[Check]:
        with self.outbox.connect() as conn:
            try:
                current = schema_revision(conn)
            except RevisionUnreadable as exc:
                self.migrated = True
                return [Check("schema revision", Verdict.WARNING, "the outbox tables exist; the revision is "
                              "unreadable", str(exc))]
        problem = revision_problem(current)
        if problem is not None:
            return [Check("schema revision", Verdict.FAILED, problem.summary, problem.fix)]
        self.migrated = True
        return [Check("schema revision", Verdict.OK, f"migrated, at revision {current} (the newest)")]

    def seq_path(self) -> list[Check]:
        with self.outbox.connect() as conn:
            problems = never_skip_problems(conn)
            dialect = conn.dialect.name
        if not problems:
            intact = {
                "postgresql": "sequence CACHE 1 and seq drawn by outbox_next_seq() after the transaction id",
                "mssql": "the INSTEAD OF INSERT trigger takes a rowversion ticket before it draws seqs",
                "sqlite": "seq is AUTOINCREMENT (one writer at a time)",
            }.get(dialect, "nothing to check on this database")
            return [Check("never-skip seq path", Verdict.OK, f"intact: {intact}")]
        return [Check("never-skip seq path", Verdict.FAILED, problem.summary,
                      problem.repair or "re-run `outbox-bridge migrate`, or undo the change by hand")
                for problem in problems]

    def privileges(self) -> list[Check]:
        retention = self.config.retention_period is not None
        with self.outbox.connect() as conn:
            missing = missing_privileges(conn, retention)
            user = login(conn)
        if missing is None:
            return [Check("privileges", Verdict.OK, "SQLite: no logins, the file's permissions decide")]
        if not missing:
            what = "SELECT" + (" and DELETE (retention)" if retention else "") + " on domain_events, its own tables"
            return [Check("privileges", Verdict.OK, f"login {user} has what the bridge uses: {what}")]
        lacking = "; ".join(f"{', '.join(p)} on {t}" for t, p in missing.items())
        return [Check("privileges", Verdict.FAILED, f"login {user} lacks {lacking}",
                      "; ".join(grant_statements(missing, user)))]


def _server_version(conn: Connection) -> str:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return "PostgreSQL " + str(conn.execute(text("SHOW server_version")).scalar())
    if dialect == "mssql":
        return "SQL Server " + str(conn.execute(text("SELECT CAST(SERVERPROPERTY('ProductVersion') AS NVARCHAR(64))"))
                                    .scalar())
    if dialect == "sqlite":
        return "SQLite " + str(conn.execute(text("SELECT sqlite_version()")).scalar())
    conn.execute(text("SELECT 1"))
    return dialect
