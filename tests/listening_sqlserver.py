"""A SQL Server that only listens: a stand-in for the pyodbc module that records every statement the bridge
sends and answers as a server with an empty outbox would, so that the bridge's own code can run its SQL
Server paths here, where no SQL Server can run.

    with listening_sqlserver() as server:
        engine = create_engine("mssql+pyodbc://listener/outbox")   # any mssql+pyodbc URL, any code path
        MssqlReader(engine).poll(0, 100)
    server.sent   # the statements, as SQL Server receives them

What is recorded is the text the driver would send: SQLAlchemy compiles with pyodbc's `?` markers, and
Microsoft's ODBC driver hands the statement to the server with `@P1`, `@P2`, ... in their place; so does
this recording. The queries SQLAlchemy's dialect makes while it first connects (server version, default
schema) are not the bridge's and are left out.

Answers: a statement that returns rows gets none, except that an aggregate of the whole table (COUNT, MIN,
MAX without GROUP BY) returns its one row (0 or NULL), as on an empty table, and a SELECT without FROM
returns one row of values of the selected columns' types. `answer(pattern, rows)` gives the rows for the
statements that `pattern` finds, where a code path needs more (a session holding the horizon). Every
INSERT, UPDATE or DELETE changes one row.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.sql import functions, sqltypes

#: A quoted literal, a quoted name or a comment (left as they are), or a parameter marker (numbered).
_MARKERS = re.compile(r"'(?:[^']|'')*'|\[[^\]]*\]|\"[^\"]*\"|--[^\n]*|/\*.*?\*/|(\?)", re.DOTALL)
_AGGREGATES = (functions.count, functions.min, functions.max, functions.sum)
_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
#: What SQLAlchemy's dialect asks when it first connects (not recorded): a SQL Server 2022 in READ COMMITTED.
_FIRST_CONNECT: list[tuple[str, list[tuple[Any, ...]]]] = [
    (r"(?i)serverproperty\('productversion'\)", [("16.0.4135.4",)]),
    (r"(?i)schema_name\(\)", [("dbo",)]),
    (r"(?i)test max support", [("test max support",)]),
    (r"(?i)fn_listextendedproperty", [(1,)]),
    (r"(?i)FROM sys\.system_views", [("dm_exec_sessions",)]),
    (r"(?i)TRANSACTION_ISOLATION_LEVEL", [("READ COMMITTED",)]),
    # and the clock, which the bridge reads in text
    (r"^SELECT SYSUTCDATETIME\(\)$", [(_AT,)]),
]


def as_sent(statement: str) -> str:
    """The statement as the ODBC driver sends it: each `?` marker outside a literal becomes @P1, @P2, ..."""
    numbered = iter(range(1, 10_000))
    return _MARKERS.sub(lambda m: f"@P{next(numbered)}" if m.group(1) else m.group(0), statement)


@dataclass(frozen=True, slots=True)
class Sent:
    """One statement the bridge sent, and which part of the bridge sent it."""

    sql: str
    origin: str


@dataclass(slots=True)
class _Answer:
    """The rows (or the row count) for the statements a pattern finds, for `times` statements or for all."""

    pattern: re.Pattern[str]
    rows: list[tuple[Any, ...] | dict[str, Any]]
    columns: list[str] | None = None
    rowcount: int | None = None
    times: int | None = None


@dataclass(slots=True)
class ListeningServer:
    """What the bridge sent, and the rows it is answered with."""

    sent: list[Sent] = field(default_factory=list)
    origin: str = ""
    answers: list[_Answer] = field(default_factory=lambda: [
        _Answer(re.compile(pattern), list(rows)) for pattern, rows in _FIRST_CONNECT])

    def answer(self, pattern: str, rows: Sequence[tuple[Any, ...] | dict[str, Any]] = (), *,
               columns: Sequence[str] | None = None, rowcount: int | None = None, times: int | None = None) -> None:
        """Answer the statements that `pattern` finds (re.search) with `rows` (tuples, or dicts by column
        name), or, for an INSERT, UPDATE or DELETE, with `rowcount`; the latest answer given wins, and one
        with `times` is used that many times. `columns` names the columns of a text() query."""
        self.answers.insert(0, _Answer(re.compile(pattern), list(rows), None if columns is None else list(columns),
                                       rowcount, times))

    @contextmanager
    def sending(self, origin: str) -> Iterator[None]:
        """Record the statements sent inside the block as coming from `origin`."""
        before, self.origin = self.origin, origin
        try:
            yield
        finally:
            self.origin = before

    def respond(self, sql: str, context: Any) -> tuple[list[str] | None, list[tuple[Any, ...]], int]:
        """The column names (None: no result set), rows and row count answering `sql`."""
        columns = _result_columns(context)
        for answer in self.answers:
            if answer.times == 0 or not answer.pattern.search(sql):
                continue
            if answer.times is not None:
                answer.times -= 1
            if answer.rowcount is not None:
                return None, [], answer.rowcount
            names = answer.columns or columns or [f"c{n}" for n in range(len(answer.rows[0]) if answer.rows else 1)]
            return names, [tuple(r.get(n) for n in names) if isinstance(r, dict) else r for r in answer.rows], -1
        if columns:
            return columns, _default_rows(context), -1
        if re.match(r"\s*(SELECT|WITH)\b", sql, re.IGNORECASE):
            return ["c0"], [], -1
        return None, [], 1


def _result_columns(context: Any) -> list[str]:
    compiled = getattr(context, "compiled", None)
    return [entry.keyname for entry in getattr(compiled, "_result_columns", None) or []]


def _default_rows(context: Any) -> list[tuple[Any, ...]]:
    """What an empty outbox answers: a row only for whole-table aggregates and a SELECT without FROM."""
    statement = context.compiled.statement
    entries = context.compiled._result_columns
    aggregates = [next((o for o in entry.objects if isinstance(o, _AGGREGATES)), None) for entry in entries]
    if getattr(statement, "is_select", False) and not statement.get_final_froms():
        return [tuple(_value_of(entry.type) for entry in entries)]
    if getattr(statement, "is_select", False) and all(o is not None for o in aggregates) \
            and not statement._group_by_clauses:
        return [tuple(0 if isinstance(o, functions.count) else None for o in aggregates)]
    if getattr(statement, "is_insert", False):  # OUTPUT inserted.<key>: the new row's id
        return [tuple(1 for _ in entries)]
    return []


def _value_of(type_: Any) -> Any:
    if isinstance(type_, sqltypes.Integer):
        return 1
    if isinstance(type_, sqltypes.DateTime):
        return _AT
    return None


class Error(Exception):
    pass


class Warning(Exception):  # the DB-API names it so (shadowing the builtin)
    pass


class InterfaceError(Error):
    pass


class DatabaseError(Error):
    pass


class DataError(DatabaseError):
    pass


class OperationalError(DatabaseError):
    pass


class IntegrityError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


class Cursor:
    """Records each statement and serves the rows the server chose."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.description: list[tuple[Any, ...]] | None = None
        self.rowcount = -1
        self.context: Any = None
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, sql: str, *params: Any) -> Cursor:
        server = self.connection.server
        sent = as_sent(sql)
        if server is not None and self.connection.recording:
            server.sent.append(Sent(sent, server.origin))
        names, self._rows, self.rowcount = server.respond(sent, self.context) if server else (None, [], 1)
        self.description = None if names is None else [(name, None, None, None, None, None, True) for name in names]
        self.context = None
        return self

    def executemany(self, sql: str, seq_of_params: Sequence[Any]) -> None:
        self.execute(sql, seq_of_params[0] if seq_of_params else ())

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchmany(self, size: int = 1) -> list[tuple[Any, ...]]:
        taken, self._rows = self._rows[:size], self._rows[size:]
        return taken

    def fetchall(self) -> list[tuple[Any, ...]]:
        taken, self._rows = self._rows, []
        return taken

    def nextset(self) -> bool:
        return False

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def close(self) -> None:
        pass


class Connection:
    """One session; it records once SQLAlchemy's own first-connect queries are done."""

    def __init__(self, server: ListeningServer | None) -> None:
        self.server = server
        self.recording = False
        self.autocommit = False

    def cursor(self) -> Cursor:
        return Cursor(self)

    def getinfo(self, what: int) -> str:
        return "16.00.4135"

    def add_output_converter(self, sqltype: int, converter: Any) -> None:
        pass

    def setdecoding(self, *args: Any, **kwargs: Any) -> None:
        pass

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass


def _module(server: ListeningServer) -> types.ModuleType:
    module = types.ModuleType("pyodbc", "a listening stand-in for pyodbc (tests.listening_sqlserver)")
    for exception in (Error, Warning, InterfaceError, DatabaseError, DataError, OperationalError, IntegrityError,
                      InternalError, ProgrammingError, NotSupportedError):
        setattr(module, exception.__name__, exception)
    module.__dict__.update(
        apilevel="2.0", threadsafety=1, paramstyle="qmark", version="5.2.0", pooling=True,
        SQL_DBMS_VER=18, SQL_VARCHAR=12, SQL_WVARCHAR=-9, Binary=bytes, BinaryNull=None, Cursor=Cursor,
        STRING=str, BINARY=bytes, NUMBER=int, DATETIME=datetime, ROWID=int,
        connect=lambda *args, **kwargs: Connection(server),
    )
    return module


def _hand_over_context(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                       executemany: bool) -> None:
    if isinstance(cursor, Cursor):
        cursor.context = context


def _start_recording(conn: Any) -> None:
    # A Connection of the engine's own: the dialect's first-connect queries run before any is made.
    dbapi_connection = conn.connection.dbapi_connection
    if isinstance(dbapi_connection, Connection):
        dbapi_connection.recording = True


@contextmanager
def listening_sqlserver() -> Iterator[ListeningServer]:
    """While open, every `mssql+pyodbc` engine created talks to one listening server."""
    server = ListeningServer()
    saved = sys.modules.get("pyodbc")
    sys.modules["pyodbc"] = _module(server)
    event.listen(Engine, "before_cursor_execute", _hand_over_context)
    event.listen(Engine, "engine_connect", _start_recording)
    try:
        yield server
    finally:
        event.remove(Engine, "engine_connect", _start_recording)
        event.remove(Engine, "before_cursor_execute", _hand_over_context)
        if saved is None:
            del sys.modules["pyodbc"]
        else:
            sys.modules["pyodbc"] = saved
