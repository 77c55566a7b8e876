"""The one place that builds database engines, and the reader for an engine's dialect."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import SingletonThreadPool, StaticPool

from bridge.errors import ConfigurationError
from bridge.store.failures import refused_connection
from bridge.store.postgres import application_name
from bridge.store.reader import OutboxReader


def translate_refusals(engine: Engine) -> None:
    """Make a refused login or TLS failure raise `DatabaseLoginError` / `DatabaseTlsError` wherever the
    engine connects (first use, a pool reconnect, a pre-ping), so no caller retries it as "unreachable"."""

    @event.listens_for(engine, "handle_error")
    def _refused(context: ExceptionContext) -> BaseException | None:
        # Only while connecting: a statement's error that merely mentions a role is something else.
        if context.connection is not None or context.engine is None:
            return None
        if not isinstance(context.sqlalchemy_exception, DBAPIError):
            return None
        return refused_connection(context.sqlalchemy_exception, context.engine.url)


def make_engine(url: str) -> Engine:
    """An engine tuned for the bridge: pre-ping (survive a database restart), WAL and a busy timeout on
    SQLite, UTC sessions named `outbox-bridge` on PostgreSQL, refused logins and TLS failures as the bridge's
    own errors."""
    if url.startswith("sqlite"):
        engine = create_engine(url, pool_pre_ping=True)
        translate_refusals(engine)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA busy_timeout=10000")
            # The migration leaves the file in WAL mode, which persists, so this is normally only a read.
            # Switching needs an exclusive lock, and beside a busy writer SQLite refuses it at once rather
            # than wait (waiting could deadlock): only an outbox made before that switches here.
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    engine = create_engine(url, pool_pre_ping=True, pool_size=4, max_overflow=4,
                           connect_args=application_name(make_url(url)))
    translate_refusals(engine)
    if engine.dialect.name == "postgresql":

        @event.listens_for(engine, "connect")
        def _utc_session(dbapi_conn: Any, _: Any) -> None:
            # Timestamps then arrive already in UTC, and the row reader has nothing to convert.
            cursor = dbapi_conn.cursor()
            cursor.execute("SET TIME ZONE 'UTC'")
            cursor.close()
            dbapi_conn.commit()

    return engine


def any_thread(engine: Engine) -> bool:
    """Whether a connection of the engine may be taken on any thread and see the same database: not a SQLite
    database in memory, which lives in one connection (one per thread, or one shared by all)."""
    return not isinstance(engine.pool, (SingletonThreadPool, StaticPool))


def make_reader(engine: Engine) -> OutboxReader:
    """The outbox reader for the engine's dialect."""
    name = engine.dialect.name
    if name == "sqlite":
        from bridge.store.sqlite import SqliteReader

        return SqliteReader(engine)
    if name == "postgresql":
        from bridge.store.postgres import PostgresReader

        return PostgresReader(engine)
    if name == "mssql":
        from bridge.store.mssql import MssqlReader

        return MssqlReader(engine)
    raise ConfigurationError(
        f"OUTBOX_DB_URL uses the {name!r} dialect; the bridge supports sqlite, postgresql and mssql"
    )
