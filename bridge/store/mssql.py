"""Reading the outbox on SQL Server below the commit-visibility horizon of `rowversion`.

Every write stamps its row with the database's next `rowversion`; `MIN_ACTIVE_ROWVERSION()` is the
lowest stamp of a transaction still open. A read takes three steps, in this order, because the order
is what makes a hole safe to settle:

1. `low = MIN_ACTIVE_ROWVERSION()`: every transaction stamped below it has ended, so its row (if it
   committed) is visible to any statement that starts afterwards;
2. the rows after the cursor, skipping rows still locked by their writer (READPAST): a read never
   waits behind an open transaction, and a skipped row is a gap like any other, which the horizon
   holds until its writer ends;
3. `high = @@DBTS + 1`: every stamp handed out before step 2 read is below it.

A hole seen in step 2 is marked with `high`; a later read whose `low` reaches the mark proves that
every writer that could own the hole has ended before that later read's rows were taken, so the
hole is permanent if that read still misses it (`bridge.core.holes`). This needs every writer to hold
an active stamp before it draws its seq: the outbox's insert trigger stamps a ticket row first (see
the migrations). `@@DBTS` alone is not a horizon: it moves when a transaction writes, not when it
commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, Final

from sqlalchemy import BigInteger, Select, cast, literal_column, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from bridge.core.holes import Horizon
from bridge.schema import domain_events
from bridge.store.failures import store_error
from bridge.store.reader import SqlReader, VisibleRows
from bridge.store.rows import ROW_COLUMNS, OutboxRow

# rowversion is binary(8); CAST to BIGINT gives its integer value (it never reaches the sign bit).
LOW: Final = select(cast(literal_column("MIN_ACTIVE_ROWVERSION()"), BigInteger).label("low"))
HIGH: Final = select((cast(literal_column("@@DBTS"), BigInteger) + 1).label("high"))

#: SQL Server's error number when a login may not read the server's transaction views.
_NO_VIEW_SERVER_STATE: Final = ("VIEW SERVER STATE", "VIEW DATABASE STATE", "(300)", "(297)")

_HOLDER = text(
    """
    SELECT TOP 1 s.session_id, t.transaction_id, t.transaction_begin_time AS started_at,
           s.status AS state, s.program_name AS application_name, s.host_name AS client,
           s.login_name
    FROM sys.dm_tran_active_transactions AS t
    JOIN sys.dm_tran_session_transactions AS st ON st.transaction_id = t.transaction_id
    JOIN sys.dm_exec_sessions AS s ON s.session_id = st.session_id
    JOIN sys.dm_tran_database_transactions AS dt ON dt.transaction_id = t.transaction_id
    WHERE st.session_id <> @@SPID AND t.transaction_type = 1
      AND dt.database_id = DB_ID() AND dt.database_transaction_log_record_count > 0
    ORDER BY t.transaction_begin_time
    """
)


def rows_after_readpast(after: int, limit: int) -> Select[Any]:
    """Up to `limit` committed rows above `after` in seq order, skipping rows their writer still locks."""
    seq = domain_events.c.seq
    return (
        select(*ROW_COLUMNS).with_hint(domain_events, "WITH (READPAST)", "mssql")
        .where(seq > after).order_by(seq).limit(limit)
    )


class MssqlSession:
    """One read's connection, as the three statements of the rowversion read."""

    __slots__ = ("conn",)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def min_active_rowversion(self) -> int:
        return int(self.conn.execute(LOW).scalar_one())

    def rows_after(self, after: int, limit: int) -> tuple[OutboxRow, ...]:
        return tuple(OutboxRow.from_mapping(r) for r in self.conn.execute(rows_after_readpast(after, limit)).mappings())

    def next_rowversion(self) -> int:
        return int(self.conn.execute(HIGH).scalar_one())


def read_visible(session: MssqlSession, after: int, limit: int) -> VisibleRows:
    """Up to `limit` committed rows above `after`, with `low` taken before and `high` after the read."""
    low = session.min_active_rowversion()
    rows = session.rows_after(after, limit)
    high = session.next_rowversion()
    return VisibleRows(rows, Horizon(low=min(low, high), high=high))


def horizon_holder(conn: Connection) -> dict[str, Any] | None:
    """The oldest open user transaction that has written in this database, or None."""
    try:
        row = conn.execute(_HOLDER).mappings().first()
    except DBAPIError as exc:
        if any(part in str(exc.orig) for part in _NO_VIEW_SERVER_STATE):
            return {"unknown": "the bridge's login may not read sys.dm_tran_active_transactions: "
                               "GRANT VIEW SERVER STATE (or VIEW DATABASE STATE) to it to see which "
                               "transaction holds the horizon back"}
        raise store_error(exc, "listing open transactions (sys.dm_tran_active_transactions)") from exc
    if row is None:
        return None
    return {
        "pid": int(row["session_id"]),
        "xid": str(row["transaction_id"]),
        "started_at": row["started_at"].isoformat() if row["started_at"] else None,
        "state": row["state"],
        "application_name": row["application_name"],
        "client": row["client"],
        "login": row["login_name"],
    }


@contextmanager
def _session(engine: Engine) -> Iterator[MssqlSession]:
    with engine.connect() as conn:
        yield MssqlSession(conn)


class MssqlReader(SqlReader[MssqlSession]):
    """SQL Server tail: rowversion horizon, adaptive polling (there is no NOTIFY)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, partial(_session, engine), read_visible)

    def horizon_holder(self) -> dict[str, Any] | None:
        waiting_on = self.waiting_on
        if waiting_on is None:
            return None
        holder: dict[str, Any] | None = self._run("listing open transactions", horizon_holder)
        return None if holder is None else holder | {"waiting_on_seq": waiting_on.first}
