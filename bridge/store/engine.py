"""The one place that builds database engines, and the reader for an engine's dialect."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine

from bridge.errors import ConfigurationError
from bridge.store.reader import OutboxReader


def make_engine(url: str) -> Engine:
    """An engine tuned for the bridge: pre-ping (survive a database restart), WAL and a busy timeout on
    SQLite, UTC sessions on PostgreSQL."""
    if url.startswith("sqlite"):
        engine = create_engine(url, pool_pre_ping=True)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=10000")
            cursor.close()

        return engine
    engine = create_engine(url, pool_pre_ping=True, pool_size=4, max_overflow=4)
    if engine.dialect.name == "postgresql":

        @event.listens_for(engine, "connect")
        def _utc_session(dbapi_conn: Any, _: Any) -> None:
            # Timestamps then arrive already in UTC, and the row reader has nothing to convert.
            cursor = dbapi_conn.cursor()
            cursor.execute("SET TIME ZONE 'UTC'")
            cursor.close()
            dbapi_conn.commit()

    return engine


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
