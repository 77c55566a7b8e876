"""What the integration tests' writers say in each dialect's SQL, so that a scenario is written once and
runs on every backend: insert an event and learn its seq, lock an aggregate's row until commit, set and
roll back to a savepoint, insert many rows in one statement, tell a deadlock victim; and which backends
a scenario runs on (PostgreSQL always; SQL Server when the `sqlserver_url` fixture finds one, else it
skips and says why).

    @pytest.fixture(params=BACKENDS)
    def db_url(request: pytest.FixtureRequest) -> str:
        return database_url(request)

    with engine.begin() as conn:
        seq = writer_sql(conn).insert(conn, event_id, "order", "a-1", '{"n": 1}')

SQL Server's outbox is written through its INSTEAD OF INSERT trigger (migration 0002), which refuses
`OUTPUT inserted.seq` and numbers the rows of one statement itself: the seq is read back by event_id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import NamedTuple

import pytest
from sqlalchemy import TextClause, create_engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

#: The backends a shared scenario runs on, as fixture params; SQL Server's carry the `sqlserver` marker.
BACKENDS = ["postgresql", pytest.param("mssql", marks=pytest.mark.sqlserver)]

_URL_FIXTURES = {"postgresql": "postgres_url", "mssql": "sqlserver_url"}


def database_url(request: pytest.FixtureRequest, *, read_committed_snapshot: bool = False) -> str:
    """A fresh, empty database of the backend `request.param` names (one of BACKENDS). On SQL Server,
    `read_committed_snapshot` turns READ_COMMITTED_SNAPSHOT on, so that READ COMMITTED reads see the
    last committed version of a row instead of waiting for its writer; PostgreSQL always reads so."""
    url = str(request.getfixturevalue(_URL_FIXTURES[request.param]))
    if read_committed_snapshot and request.param == "mssql":
        turn_on_read_committed_snapshot(url)
    return url


def turn_on_read_committed_snapshot(url: str) -> None:
    """READ_COMMITTED_SNAPSHOT ON for the SQL Server database of `url`, checked. The change needs the
    database to itself: run it before anything else connects."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("ALTER DATABASE CURRENT SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE"))
            on = conn.execute(text("SELECT is_read_committed_snapshot_on FROM sys.databases "
                                   "WHERE database_id = DB_ID()")).scalar_one()
        assert on, "READ_COMMITTED_SNAPSHOT did not turn on"
    finally:
        engine.dispose()


class EventRow(NamedTuple):
    """One 'order' event of a multi-row insert."""

    event_id: str
    aggregate_id: str
    payload: str


class WriterSql(ABC):
    """One dialect's SQL for an application that writes the outbox."""

    @abstractmethod
    def insert(self, conn: Connection, event_id: str, aggregate_type: str, aggregate_id: str, payload: str,
               event_type: str = "Happened") -> int:
        """Insert one event in the open transaction of `conn`; return its seq."""

    @abstractmethod
    def lock_aggregate(self, conn: Connection, aggregate_id: str) -> int:
        """The version in the aggregate's row of `aggregate_locks`, the row locked until the transaction
        ends: the next writer of that aggregate waits here and then reads the version this one wrote."""

    @abstractmethod
    def savepoint(self, conn: Connection, name: str) -> None:
        """Set a savepoint in the open transaction (which has already written something)."""

    @abstractmethod
    def rollback_to(self, conn: Connection, name: str) -> None:
        """Undo what the transaction did since the savepoint; the transaction stays open."""

    @abstractmethod
    def multi_row_insert(self, rows: int) -> TextClause:
        """One statement inserting `rows` 'order' events, parameters e0, a0, p0, e1, ... (see `params`)."""

    @abstractmethod
    def is_deadlock(self, exc: DBAPIError) -> bool:
        """Whether the server chose this transaction as a deadlock victim (and so rolled it back)."""

    @staticmethod
    def params(rows: Sequence[EventRow]) -> dict[str, str]:
        """The parameters of `multi_row_insert(len(rows))`."""
        values: dict[str, str] = {}
        for k, row in enumerate(rows):
            values.update({f"e{k}": row.event_id, f"a{k}": row.aggregate_id, f"p{k}": row.payload})
        return values


_COLUMNS = "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "


def _event(event_id: str, aggregate_type: str, aggregate_id: str, event_type: str, payload: str) -> dict[str, str]:
    return {"event_id": event_id, "aggregate_type": aggregate_type, "aggregate_id": aggregate_id,
            "event_type": event_type, "payload": payload}


class PostgresWriterSql(WriterSql):
    _INSERT = text(_COLUMNS + "VALUES (:event_id, :aggregate_type, :aggregate_id, :event_type, :payload) RETURNING seq")
    _LOCK = text("SELECT version FROM aggregate_locks WHERE aggregate_id = :a FOR UPDATE")

    def insert(self, conn: Connection, event_id: str, aggregate_type: str, aggregate_id: str, payload: str,
               event_type: str = "Happened") -> int:
        return int(conn.execute(self._INSERT, _event(event_id, aggregate_type, aggregate_id, event_type,
                                                     payload)).scalar_one())

    def lock_aggregate(self, conn: Connection, aggregate_id: str) -> int:
        return int(conn.execute(self._LOCK, {"a": aggregate_id}).scalar_one())

    def savepoint(self, conn: Connection, name: str) -> None:
        conn.execute(text(f"SAVEPOINT {name}"))

    def rollback_to(self, conn: Connection, name: str) -> None:
        conn.execute(text(f"ROLLBACK TO SAVEPOINT {name}"))

    def multi_row_insert(self, rows: int) -> TextClause:
        values = ", ".join(f"(:e{k}, 'order', :a{k}, 'T', :p{k})" for k in range(rows))
        return text(_COLUMNS + f"VALUES {values}")

    def is_deadlock(self, exc: DBAPIError) -> bool:
        return getattr(exc.orig, "sqlstate", None) == "40P01"


class MssqlWriterSql(WriterSql):
    _INSERT = text(_COLUMNS + "VALUES (:event_id, :aggregate_type, :aggregate_id, :event_type, :payload)")
    # The transaction reads its own row; the unique index on event_id makes this a seek.
    _SEQ = text("SELECT seq FROM domain_events WHERE event_id = :event_id")
    # UPDLOCK: a locking read of the latest committed version, even under READ_COMMITTED_SNAPSHOT.
    _LOCK = text("SELECT version FROM aggregate_locks WITH (UPDLOCK, ROWLOCK) WHERE aggregate_id = :a")

    def insert(self, conn: Connection, event_id: str, aggregate_type: str, aggregate_id: str, payload: str,
               event_type: str = "Happened") -> int:
        conn.execute(self._INSERT, _event(event_id, aggregate_type, aggregate_id, event_type, payload))
        return int(conn.execute(self._SEQ, {"event_id": event_id}).scalar_one())

    def lock_aggregate(self, conn: Connection, aggregate_id: str) -> int:
        return int(conn.execute(self._LOCK, {"a": aggregate_id}).scalar_one())

    def savepoint(self, conn: Connection, name: str) -> None:
        # SAVE TRANSACTION needs an open transaction (@@TRANCOUNT > 0): the caller has written already.
        conn.execute(text(f"SAVE TRANSACTION {name}"))

    def rollback_to(self, conn: Connection, name: str) -> None:
        conn.execute(text(f"ROLLBACK TRANSACTION {name}"))

    def multi_row_insert(self, rows: int) -> TextClause:
        # INSERT ... SELECT: one statement, so the trigger takes one ticket and numbers every row after it.
        values = ", ".join(f"(:e{k}, :a{k}, :p{k})" for k in range(rows))
        return text(_COLUMNS + "SELECT v.event_id, 'order', v.aggregate_id, 'T', v.payload "
                    f"FROM (VALUES {values}) AS v (event_id, aggregate_id, payload)")

    def is_deadlock(self, exc: DBAPIError) -> bool:
        # pyodbc: args[0] is the SQLSTATE, 40001 for error 1205 (deadlock victim).
        args: tuple[object, ...] = getattr(exc.orig, "args", ())
        return bool(args) and args[0] == "40001" and "1205" in str(exc.orig)


_WRITERS: dict[str, WriterSql] = {"postgresql": PostgresWriterSql(), "mssql": MssqlWriterSql()}


def writer_sql(conn: Connection) -> WriterSql:
    """The SQL for the dialect of `conn`."""
    name = conn.dialect.name
    if name not in _WRITERS:
        raise ValueError(f"the test writers speak {', '.join(_WRITERS)}, not {name}")
    return _WRITERS[name]
