"""Reading the outbox on SQL Server below the commit-visibility horizon of `rowversion`.

Every write stamps its row with the database's next `rowversion`; `MIN_ACTIVE_ROWVERSION()` is the
lowest stamp of a transaction still open. A read takes three steps, in this order, because the order
is what makes a hole safe to settle:

1. `low = MIN_ACTIVE_ROWVERSION()`: every transaction stamped below it has ended, so its row (if it
   committed) is visible to any statement that starts afterwards;
2. the rows after the cursor, skipping rows still locked by their writer (READPAST, with
   READCOMMITTEDLOCK so that it holds under READ_COMMITTED_SNAPSHOT too): a read never
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
from dataclasses import replace
from functools import partial
from typing import Any, Final

from sqlalchemy import BigInteger, Select, cast, literal_column, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from bridge.core.holes import Horizon
from bridge.core.records import OutboxRow
from bridge.schema import MSSQL_TICKETS, as_utc, domain_events
from bridge.store.failures import store_error
from bridge.store.holders import MSSQL_FIELDS, HorizonHolder
from bridge.store.reader import SqlReader, VisibleRows
from bridge.store.rows import ROW_COLUMNS

# rowversion is binary(8); CAST to BIGINT gives its integer value (it never reaches the sign bit).
LOW: Final = select(cast(literal_column("MIN_ACTIVE_ROWVERSION()"), BigInteger).label("low"))
HIGH: Final = select((cast(literal_column("@@DBTS"), BigInteger) + 1).label("high"))

#: What SQL Server says when a login may not read the server's session and transaction views.
_NO_VIEW_SERVER_STATE: Final = ("VIEW SERVER STATE", "VIEW DATABASE STATE", "(300)", "(297)")

#: The session whose open transaction holds MIN_ACTIVE_ROWVERSION(): its uncommitted ticket carries
#: that stamp (the insert trigger writes one before drawing seqs). Read uncommitted on purpose, as only
#: an open transaction's ticket matters; this needs no server-level permission.
_TICKET_HOLDER = text(
    f"SELECT TOP 1 session_id FROM {MSSQL_TICKETS} WITH (NOLOCK) "
    "WHERE stamped = MIN_ACTIVE_ROWVERSION() ORDER BY stamped"
)

#: What the server knows of a session's transaction (needs VIEW SERVER STATE for other logins' sessions).
#: transaction_begin_time is the server's local time without an offset: given the server's offset here, it
#: comes back as an aware timestamp, so its age is right whatever time zone the server runs in.
_HOLDER = text(
    """
    SELECT TOP 1 s.session_id, t.transaction_id,
           TODATETIMEOFFSET(t.transaction_begin_time, DATEPART(TZOFFSET, SYSDATETIMEOFFSET())) AS started_at,
           s.status AS state, s.program_name AS application_name, s.host_name AS client,
           s.login_name
    FROM sys.dm_exec_sessions AS s
    LEFT JOIN sys.dm_tran_session_transactions AS st ON st.session_id = s.session_id
    LEFT JOIN sys.dm_tran_active_transactions AS t ON t.transaction_id = st.transaction_id
    WHERE s.session_id = :session_id
    ORDER BY t.transaction_begin_time
    """
)


def rows_after_readpast(after: int, limit: int) -> Select[Any]:
    """Up to `limit` committed rows above `after` in seq order, skipping rows their writer still locks."""
    seq = domain_events.c.seq
    return (
        # READCOMMITTEDLOCK: SQL Server refuses READPAST in a READ COMMITTED session of a database with
        # READ_COMMITTED_SNAPSHOT on unless the read takes locks; with it the read is the same either way.
        select(*ROW_COLUMNS).with_hint(domain_events, "WITH (READCOMMITTEDLOCK, READPAST)", "mssql")
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


def horizon_holder(conn: Connection) -> HorizonHolder | None:
    """The session whose open transaction holds the horizon back, with what the server says of it; None
    when no outbox writer holds it (another transaction that writes rowversions may, unnamed)."""
    try:
        session_id = conn.execute(_TICKET_HOLDER).scalar()
        if session_id is None:
            return None
        row = conn.execute(_HOLDER, {"session_id": int(session_id)}).mappings().first()
    except DBAPIError as exc:
        if any(part in str(exc.orig) for part in _NO_VIEW_SERVER_STATE):
            return HorizonHolder(
                pid=session_id,
                unknown="the bridge's login may not read sys.dm_exec_sessions: GRANT VIEW SERVER STATE "
                        "(or VIEW DATABASE STATE) to it to see that session's program, host and start",
                reported=("pid", "unknown"))
        raise store_error(exc, "naming the transaction that holds MIN_ACTIVE_ROWVERSION()") from exc
    if row is None:
        return HorizonHolder(pid=int(session_id), reported=("pid",))
    return HorizonHolder(
        pid=int(row["session_id"]),
        xid=None if row["transaction_id"] is None else str(row["transaction_id"]),
        started_at=None if row["started_at"] is None else as_utc(row["started_at"]),
        state=row["state"],
        application_name=row["application_name"],
        client=row["client"],
        login=row["login_name"],
        reported=MSSQL_FIELDS,
    )


@contextmanager
def _session(engine: Engine) -> Iterator[MssqlSession]:
    with engine.connect() as conn:
        yield MssqlSession(conn)


class MssqlReader(SqlReader[MssqlSession]):
    """SQL Server tail: rowversion horizon, adaptive polling (there is no NOTIFY)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, partial(_session, engine), read_visible)

    def horizon_holder(self) -> HorizonHolder | None:
        waiting_on = self.waiting_on
        if waiting_on is None:
            return None
        holder: HorizonHolder | None = self.table.run("listing open transactions", horizon_holder)
        return None if holder is None else replace(holder, waiting_on_seq=waiting_on.first)
