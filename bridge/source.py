"""The tail of the outbox, one implementation per dialect, behind one narrow interface.

Each `poll` returns rows that are safe to publish now, contiguous after the cursor and in seq order,
and how many permanent holes were passed over. PostgreSQL uses the snapshot horizon
(`bridge.store.postgres`); SQLite has one writer at a time, so commit order is seq order and a gap
can only be a deleted row. Waiting for new rows is LISTEN/NOTIFY on PostgreSQL and adaptive polling
elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from bridge.schema import NOTIFY_CHANNEL, domain_events
from bridge.store.failures import store_error
from bridge.store.holes import HoleTracker, Horizon, SeqRange
from bridge.store.rows import OutboxRow, select_after, select_after_sqlite

log = logging.getLogger("bridge.source")

# SQLite: any gap below a visible row is final, so every hole is settled under this constant horizon.
_ALWAYS_SETTLED = Horizon(low=0, high=0)


@dataclass(frozen=True, slots=True)
class Batch:
    """Rows to publish now in seq order, and the holes settled before them."""

    rows: tuple[OutboxRow, ...]
    settled: tuple[SeqRange, ...]
    waiting_on: SeqRange | None

    @property
    def holes(self) -> int:
        return sum(hole.count for hole in self.settled)


class OutboxSource(Protocol):
    """What the daemon needs from the outbox database."""

    def rewind(self, cursor: int) -> None: ...

    def poll(self, limit: int) -> Batch: ...

    def head_seq(self) -> int: ...

    def oldest_after(self, seq: int) -> OutboxRow | None: ...

    def horizon_holder(self) -> dict[str, Any] | None: ...

    def wait(self, timeout: float) -> None: ...

    def close(self) -> None: ...


class _SqlSource:
    """Shared parts: head seq, the oldest unpublished row, adaptive waiting."""

    def __init__(self, engine: Engine, cursor: int) -> None:
        self.engine = engine
        self.tracker = HoleTracker(cursor)
        self._wakeup = threading.Event()

    def rewind(self, cursor: int) -> None:
        self.tracker.rewind(cursor)

    def _run(self, doing: str, work: Any) -> Any:
        try:
            with self.engine.connect() as conn:
                return work(conn)
        except DBAPIError as exc:
            raise store_error(exc, doing) from exc

    def head_seq(self) -> int:
        head = self._run("reading the head seq", lambda c: c.execute(select(func.max(domain_events.c.seq))).scalar())
        return int(head or 0)

    def oldest_after(self, seq: int) -> OutboxRow | None:
        rows = self._run("reading the oldest unpublished event", lambda c: select_after(c, seq, 1))
        return rows[0] if rows else None

    def horizon_holder(self) -> dict[str, Any] | None:
        return None

    def wait(self, timeout: float) -> None:
        self._wakeup.wait(timeout)
        self._wakeup.clear()

    def close(self) -> None:
        self.engine.dispose()


class SqliteSource(_SqlSource):
    """SQLite: one writer at a time, so rows appear in seq order and a gap is final at once."""

    def poll(self, limit: int) -> Batch:
        rows = self._run(f"reading domain_events after seq {self.tracker.cursor}",
                         lambda c: select_after_sqlite(c, self.tracker.cursor, limit))
        step = self.tracker.advance((row.seq for row in rows), _ALWAYS_SETTLED)
        return Batch(tuple(rows), step.settled, step.waiting_on)


class PostgresSource(_SqlSource):
    """PostgreSQL: the snapshot horizon, and LISTEN/NOTIFY to wake up within milliseconds."""

    def __init__(self, engine: Engine, cursor: int) -> None:
        super().__init__(engine, cursor)
        self._listen: Any = None
        self.waiting_on: SeqRange | None = None

    def poll(self, limit: int) -> Batch:
        from bridge.store import postgres

        step = self._run(f"reading domain_events after seq {self.tracker.cursor}",
                         lambda c: postgres.poll(c, self.tracker, limit))
        self.waiting_on = step.waiting_on
        return Batch(step.rows, step.settled, step.waiting_on)

    def horizon_holder(self) -> dict[str, Any] | None:
        """The oldest running transaction, when a hole is waiting on it; None when nothing blocks."""
        from bridge.store import postgres

        if self.waiting_on is None:
            return None
        holders = self._run("listing horizon holders", lambda c: postgres.horizon_holders(c, limit=1))
        if not holders:
            return None
        holder = holders[0]
        return {
            "pid": holder.pid,
            "xid": holder.xid,
            "started_at": holder.started_at.isoformat() if holder.started_at else None,
            "state": holder.state,
            "application_name": holder.application_name,
            "client": holder.client,
            "query": holder.query,
            "waiting_on_seq": self.waiting_on.first,
        }

    def wait(self, timeout: float) -> None:
        """Block until a NOTIFY from the insert trigger or the timeout; falls back to sleeping."""
        try:
            if self._listen is None:
                self._listen = self._connect_listener()
            for _ in self._listen.notifies(timeout=timeout, stop_after=1):
                pass
        except Exception as exc:  # noqa: BLE001 - a broken LISTEN connection only costs latency
            log.warning("LISTEN connection lost; polling until it is back", extra={"error": str(exc)})
            self._drop_listener()
            super().wait(timeout)

    def _connect_listener(self) -> Any:
        import psycopg

        url = self.engine.url.set(drivername="postgresql")
        conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True, connect_timeout=5)
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return conn

    def _drop_listener(self) -> None:
        if self._listen is not None:
            with contextlib.suppress(Exception):  # already broken
                self._listen.close()
        self._listen = None

    def close(self) -> None:
        self._drop_listener()
        super().close()


def make_engine(url: str) -> Engine:
    """An engine tuned for the bridge: pre-ping (survive a database restart), WAL and a busy timeout on SQLite."""
    from sqlalchemy import create_engine

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


def make_source(engine: Engine, cursor: int) -> OutboxSource:
    name = engine.dialect.name
    if name == "sqlite":
        return SqliteSource(engine, cursor)
    if name == "postgresql":
        return PostgresSource(engine, cursor)
    if name == "mssql":
        from bridge.store.mssql import MssqlSource

        return MssqlSource(engine, cursor)
    from bridge.errors import ConfigurationError

    raise ConfigurationError(
        f"OUTBOX_DB_URL uses the {name!r} dialect; the bridge supports sqlite, postgresql and mssql"
    )
