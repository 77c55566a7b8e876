"""Reading the outbox on SQL Server below the commit-visibility horizon of `rowversion`.

Every insert stamps its row with the database's next `rowversion`; `MIN_ACTIVE_ROWVERSION()` is the
lowest stamp of a transaction still open. A read takes three steps, in this order, because the order
is what makes a hole safe to settle:

1. `low = MIN_ACTIVE_ROWVERSION()`: every transaction stamped below it has ended, so its row (if it
   committed) is visible to any statement that starts afterwards;
2. the rows after the cursor (a statement of its own, under READ COMMITTED or its snapshot variant);
3. `high = @@DBTS + 1`: every row that existed when step 2 read is stamped below it.

A hole seen in step 2 is marked with `high`; a later read whose `low` reaches the mark proves that
every writer that could own the hole has ended before that later read's rows were taken, so the
hole is permanent if that read still misses it (`bridge.store.holes`). `@@DBTS` alone is not a
horizon: it moves when a transaction starts writing, not when it commits.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, cast, literal_column, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from bridge.store.failures import store_error
from bridge.store.holes import HoleTracker, Horizon
from bridge.store.postgres import Poll, VisibleRows, advance
from bridge.store.rows import OutboxRow, rows_after

# rowversion is binary(8); CAST to BIGINT gives its integer value (it never reaches the sign bit).
LOW = select(cast(literal_column("MIN_ACTIVE_ROWVERSION()"), BigInteger).label("low"))
HIGH = select((cast(literal_column("@@DBTS"), BigInteger) + 1).label("high"))

_HOLDER = text(
    """
    SELECT TOP 1 s.session_id, t.transaction_id, t.transaction_begin_time AS started_at,
           s.status AS state, s.program_name AS application_name, s.host_name AS client,
           s.login_name
    FROM sys.dm_tran_active_transactions AS t
    JOIN sys.dm_tran_session_transactions AS st ON st.transaction_id = t.transaction_id
    JOIN sys.dm_exec_sessions AS s ON s.session_id = st.session_id
    WHERE st.session_id <> @@SPID AND t.transaction_type = 1
    ORDER BY t.transaction_begin_time
    """
)


def read_visible(conn: Connection, after: int, limit: int) -> VisibleRows:
    """Up to `limit` committed rows above `after`, with `low` taken before and `high` after the read."""
    try:
        low = int(conn.execute(LOW).scalar_one())
        rows = tuple(OutboxRow.from_mapping(r) for r in conn.execute(rows_after(after, limit)).mappings())
        high = int(conn.execute(HIGH).scalar_one())
    except DBAPIError as exc:
        raise store_error(exc, f"reading domain_events after seq {after}") from exc
    return VisibleRows(rows, Horizon(low=min(low, high), high=high))


def poll(conn: Connection, tracker: HoleTracker, limit: int) -> Poll:
    """Read after the tracker's cursor and advance it: what to publish now, in seq order."""
    return advance(tracker, read_visible(conn, tracker.cursor, limit))


def horizon_holder(conn: Connection) -> dict[str, Any] | None:
    """The oldest open user transaction (sys.dm_tran_active_transactions), or None."""
    try:
        row = conn.execute(_HOLDER).mappings().first()
    except DBAPIError as exc:
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


class MssqlSource:
    """SQL Server tail: rowversion horizon, adaptive polling (there is no NOTIFY)."""

    def __init__(self, engine: Engine, cursor: int) -> None:
        from bridge.source import SqliteSource

        # The shared parts (head seq, oldest row, waiting, closing) are dialect-neutral.
        self._common = SqliteSource(engine, cursor)
        self.engine = engine
        self.tracker = self._common.tracker
        self.waiting_on: Any = None

    def rewind(self, cursor: int) -> None:
        self.tracker.rewind(cursor)

    def poll(self, limit: int) -> Any:
        from bridge.source import Batch

        try:
            with self.engine.connect() as conn:
                step = poll(conn, self.tracker, limit)
        except DBAPIError as exc:
            raise store_error(exc, f"reading domain_events after seq {self.tracker.cursor}") from exc
        self.waiting_on = step.waiting_on
        return Batch(step.rows, step.settled, step.waiting_on)

    def head_seq(self) -> int:
        return self._common.head_seq()

    def oldest_after(self, seq: int) -> OutboxRow | None:
        return self._common.oldest_after(seq)

    def horizon_holder(self) -> dict[str, Any] | None:
        if self.waiting_on is None:
            return None
        with self.engine.connect() as conn:
            holder = horizon_holder(conn)
        return None if holder is None else holder | {"waiting_on_seq": self.waiting_on.first}

    def wait(self, timeout: float) -> None:
        self._common.wait(timeout)

    def close(self) -> None:
        self._common.close()
