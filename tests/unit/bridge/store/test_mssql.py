"""The SQL Server reader: its SQL compiles for mssql and names the rowversion horizon, it reads past
locked rows instead of waiting, and it takes `low` before and `high` after the row read, which is
what makes settling a hole safe."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy.dialects import mssql
from sqlalchemy.exc import DBAPIError

from bridge.core.records import OutboxRow
from bridge.errors import TransientStoreError
from bridge.store import mssql as reader
from bridge.store.reader import TailReader
from tests.support import Tail

pytestmark = pytest.mark.unit


def _sql(statement: Any) -> str:
    return str(statement.compile(dialect=mssql.dialect(), compile_kwargs={"literal_binds": True}))


def test_queries_compile_for_sql_server() -> None:
    assert "MIN_ACTIVE_ROWVERSION()" in _sql(reader.LOW)
    assert "@@DBTS" in _sql(reader.HIGH)
    rows = _sql(reader.rows_after_readpast(41, 500))
    assert "TOP 500" in rows and "seq > 41" in rows and "ORDER BY domain_events.seq" in rows
    # READPAST with READCOMMITTEDLOCK: SQL Server refuses READPAST alone under READ_COMMITTED_SNAPSHOT.
    assert "domain_events WITH (READCOMMITTEDLOCK, READPAST)" in rows
    assert "sys.dm_tran_active_transactions" in str(reader._HOLDER)
    assert "MIN_ACTIVE_ROWVERSION()" in str(reader._TICKET_HOLDER)


class _Server:
    """Answers the three statements of a read in order and records that order."""

    def __init__(self, reads: list[tuple[int, list[int], int]]) -> None:
        self.reads = reads
        self.log: list[str] = []

    def min_active_rowversion(self) -> int:
        self.log.append("low")
        return self.reads[0][0]

    def rows_after(self, after: int, limit: int) -> tuple[OutboxRow, ...]:
        self.log.append("rows")
        now = datetime.now(UTC)
        return tuple(OutboxRow(s, f"e{s}", "order", "a", "T", "{}", None, now, 1)
                     for s in self.reads[0][1] if s > after)[:limit]

    def next_rowversion(self) -> int:
        self.log.append("high")
        return self.reads.pop(0)[2]


def _tail(server: _Server) -> Tail:
    @contextmanager
    def session() -> Iterator[_Server]:
        yield server

    return Tail(TailReader(session, reader.read_visible))  # type: ignore[arg-type]


def test_low_before_rows_before_high_and_holes_wait_for_the_writers() -> None:
    server = _Server([
        (100, [1, 2, 4], 105),   # seq 3 missing while a writer stamped below 105 may be open
        (103, [1, 2, 4, 5], 108),  # still open (low 103 < mark 105): keep waiting
        (106, [1, 2, 3, 4, 5], 110),  # the writer committed: 3 is delivered, not settled
    ])
    tail = _tail(server)
    first = tail.poll(100)
    assert server.log == ["low", "rows", "high"]
    assert [r.seq for r in first.rows] == [1, 2] and first.waiting_on is not None
    second = tail.poll(100)
    assert second.rows == () and second.waiting_on is not None
    third = tail.poll(100)
    assert [r.seq for r in third.rows] == [3, 4, 5] and third.settled == ()


def test_a_rolled_back_seq_settles_once_every_older_writer_has_ended() -> None:
    tail = _tail(_Server([(50, [1, 3], 60), (60, [1, 3], 61)]))
    assert [r.seq for r in tail.poll(10).rows] == [1]
    step = tail.poll(10)
    assert [r.seq for r in step.rows] == [3]
    assert [(h.first, h.last) for h in step.settled] == [(2, 2)]


class _HolderServer:
    """Answers the two statements of `horizon_holder`: the ticket at MIN_ACTIVE_ROWVERSION(), then the DMVs."""

    def __init__(self, session_id: int | None, dmv: Exception | dict[str, Any] | None) -> None:
        self.session_id = session_id
        self.dmv = dmv

    def execute(self, statement: Any, params: Any = None) -> Any:
        sql = str(statement)
        if reader.MSSQL_TICKETS in sql:
            assert "MIN_ACTIVE_ROWVERSION()" in sql and "NOLOCK" in sql
            return _Scalar(self.session_id)
        assert params == {"session_id": self.session_id}
        if isinstance(self.dmv, Exception):
            raise self.dmv
        return _Scalar(self.dmv)


class _Scalar:
    def __init__(self, value: Any) -> None:
        self.value = value

    def scalar(self) -> Any:
        return self.value

    def mappings(self) -> _Scalar:
        return self

    def first(self) -> Any:
        return self.value


def _dbapi_error(message: str, sqlstate: str) -> DBAPIError:
    return DBAPIError("SELECT", {}, Exception(sqlstate, message))


def test_the_horizon_holder_is_the_session_whose_ticket_holds_min_active_rowversion() -> None:
    started = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    holder = reader.horizon_holder(_HolderServer(57, {  # type: ignore[arg-type]
        "session_id": 57, "transaction_id": 9001, "started_at": started, "state": "sleeping",
        "application_name": "orders-api", "client": "app-3", "login_name": "orders"}))
    assert holder is not None
    assert (holder["pid"], holder["xid"], holder["application_name"]) == (57, "9001", "orders-api")
    assert reader.horizon_holder(_HolderServer(None, None)) is None  # type: ignore[arg-type]


def test_the_holder_started_at_the_servers_local_time_is_read_as_utc_and_has_an_age() -> None:
    # The query gives transaction_begin_time the server's offset: a server on UTC+2 answers 10:00+02:00.
    local = datetime(2026, 11, 23, 10, 0, tzinfo=timezone(timedelta(hours=2)))
    holder = reader.horizon_holder(_HolderServer(57, {  # type: ignore[arg-type]
        "session_id": 57, "transaction_id": 9001, "started_at": local, "state": "sleeping",
        "application_name": "orders-api", "client": "app-3", "login_name": "orders"}))
    assert holder is not None and holder.started_at == datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    age = holder.age_s()
    assert age is not None and age > 0
    assert "TODATETIMEOFFSET(t.transaction_begin_time" in str(reader._HOLDER)


def test_without_view_server_state_the_holder_is_named_by_session_and_the_grant_is_said() -> None:
    denied = _dbapi_error("[42000] VIEW SERVER STATE permission was denied on object 'server' (300)", "42000")
    holder = reader.horizon_holder(_HolderServer(57, denied))  # type: ignore[arg-type]
    assert holder is not None and holder["pid"] == 57
    assert "GRANT VIEW SERVER STATE" in holder["unknown"]


def test_an_outage_while_naming_the_holder_is_a_transient_store_error() -> None:
    with pytest.raises(TransientStoreError, match="MIN_ACTIVE_ROWVERSION"):
        reader.horizon_holder(_HolderServer(57, _dbapi_error("Communication link failure", "08S01")))  # type: ignore[arg-type]
