"""Reading the outbox on PostgreSQL below the commit-visibility horizon, and naming what holds it back.

Each read takes the visible rows after the cursor and `pg_current_snapshot()` in ONE statement, so
the horizon describes exactly the snapshot the rows came from. The reads run in autocommit on one
connection the reader keeps: each statement is its own transaction with its own snapshot, so the horizon
moves on every read (under REPEATABLE READ every read of a transaction would see the same snapshot and
it never would), and between reads the connection holds no snapshot back from VACUUM (in a backlog, a read sent
ahead holds its own until the bridge takes it, a few milliseconds later; see `ReadAhead`).
"""

from __future__ import annotations

import contextlib
import logging
import operator
import select as io_select
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC
from typing import Any, Final

from sqlalchemy import BigInteger, ColumnElement, Select, Text, bindparam, cast, func, select, text, true
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError

from bridge.core.holes import Horizon
from bridge.core.records import OutboxRow
from bridge.errors import TransientStoreError
from bridge.schema import NOTIFY_CHANNEL, as_utc, domain_events
from bridge.store.failures import store_error
from bridge.store.holders import POSTGRES_FIELDS, HorizonHolder
from bridge.store.reader import Batch, SqlReader, VisibleRows
from bridge.store.rows import ROW_COLUMNS

log = logging.getLogger("bridge.store.postgres")


#: How the bridge's sessions show in PostgreSQL's `pg_stat_activity` (and its logs with `%a`), unless the URL
#: names its own `application_name`.
APPLICATION_NAME = "outbox-bridge"


def application_name(url: URL) -> dict[str, str]:
    """Connection arguments that name the bridge's PostgreSQL sessions; none when the URL names them already."""
    if url.get_backend_name() != "postgresql" or "application_name" in url.query:
        return {}
    return {"application_name": APPLICATION_NAME}


def _xid8_as_bigint(expression: ColumnElement[Any]) -> ColumnElement[int]:
    # xid8 has no cast to bigint; its text form is the decimal 64-bit id.
    return cast(cast(expression, Text), BigInteger)


def _visible_query() -> Select[Any]:
    snapshot = select(func.pg_current_snapshot().label("s")).subquery("snapshot")
    seq = domain_events.c.seq
    events = (
        select(*ROW_COLUMNS).where(seq > bindparam("after")).order_by(seq).limit(bindparam("limit"))
    ).lateral("events")
    return (
        select(
            _xid8_as_bigint(func.pg_snapshot_xmin(snapshot.c.s)).label("horizon_low"),
            _xid8_as_bigint(func.pg_snapshot_xmax(snapshot.c.s)).label("horizon_high"),
            *(events.c[column.name] for column in ROW_COLUMNS),
        )
        # The outer join returns the snapshot even when no row is visible. No outer ORDER BY: the lateral
        # read is already in seq order, and sorting its rows again (wide, with their payloads) took half the
        # statement's time on the server; `snapshot_rows` checks the order and sorts only if it is not.
        .select_from(snapshot.outerjoin(events, true()))
    )


#: Built once; SQLAlchemy caches its compiled form.
_VISIBLE: Final = _visible_query()


class ReadAhead:
    """The visible-rows statement sent ahead on the reads' connection, in psycopg's pipeline mode: the server
    runs it while the caller sends the batch it has, and its answer waits in the socket until `take`.

    The same statement as `PostgresSession.snapshot_rows` and, like it, one snapshot. Until it is taken or
    thrown away nothing else may use the connection. psycopg's errors come unwrapped from here: the reader
    drops the connection and reads again the usual way, which reports any failure as the store's."""

    __slots__ = ("_cursor", "_pipeline", "after", "limit")

    def __init__(self, conn: Connection, after: int, limit: int) -> None:
        self.after = after
        self.limit = limit
        driver: Any = conn.connection.driver_connection
        self._pipeline = driver.pipeline()
        self._pipeline.__enter__()
        try:
            self._cursor = driver.cursor()
            self._cursor.execute(_VISIBLE_SQL, {"after": after, "limit": limit})
        except BaseException:
            self._end()
            raise

    def take(self) -> list[tuple[Any, ...]]:
        """The answer: waits for what has not arrived yet, the interpreter's lock released meanwhile."""
        try:
            result: list[tuple[Any, ...]] = self._cursor.fetchall()
        finally:
            self._end()
        return result

    def discard(self) -> None:
        """Leave pipeline mode: psycopg reads the answer (waiting for it) and throws it away."""
        self._end()

    def _end(self) -> None:
        self._pipeline.__exit__(None, None, None)


#: `_VISIBLE` as SQLAlchemy compiles it for psycopg, for the reads sent ahead outside SQLAlchemy.
_VISIBLE_SQL: Final = str(_VISIBLE.compile(dialect=psycopg_dialect()))  # type: ignore[no-untyped-call]


class PostgresSession:
    """One read's connection, as the two statements the horizon read needs; `taken` is the answer of a read
    ahead for this read, when there was one."""

    __slots__ = ("conn", "taken")

    def __init__(self, conn: Connection, taken: list[tuple[Any, ...]] | None = None) -> None:
        self.conn = conn
        self.taken = taken

    def snapshot_rows(self, after: int, limit: int) -> tuple[int, int, tuple[OutboxRow, ...]]:
        """`pg_snapshot_xmin`, `pg_snapshot_xmax` and up to `limit` rows above `after`, from one snapshot."""
        result: Sequence[Any] | None
        result, self.taken = self.taken, None
        if result is None:
            cursor_result = self.conn.execute(_VISIBLE, {"after": after, "limit": limit})
            # The driver's own tuples: SQLAlchemy's row objects and result processors cost more than the rest
            # of the read, per event. The bridge's sessions run in UTC, so timestamps arrive as UTC already.
            result = cursor_result.cursor.fetchall()
            cursor_result.close()
        # Positional: after the two horizon columns come ROW_COLUMNS, in OutboxRow's field order.
        rows = tuple(OutboxRow(*row[2:]) for row in result if row[2] is not None)
        seqs = [row.seq for row in rows]
        if not all(map(operator.lt, seqs, seqs[1:])):
            rows = tuple(sorted(rows, key=operator.attrgetter("seq")))
        if rows and rows[0].occurred_at.tzinfo is not UTC:
            # A session not set to UTC (a connection from elsewhere than `make_engine`): normalise.
            rows = tuple(row._replace(occurred_at=as_utc(row.occurred_at)) for row in rows)
        return int(result[0][0]), int(result[0][1]), rows

    def current_xid(self) -> int:
        """A fresh transaction id, taken after the last `snapshot_rows`."""
        return int(self.conn.execute(_CURRENT_XID).scalar_one())


_CURRENT_XID: Final = select(_xid8_as_bigint(func.pg_current_xact_id()))


def read_visible(session: PostgresSession, after: int, limit: int) -> VisibleRows:
    """Up to `limit` visible rows with seq above `after`, and the horizon of the same snapshot."""
    low, high, rows = session.snapshot_rows(after, limit)
    if _has_gap(after, rows):
        # pg_snapshot_xmax is latestCompletedXid + 1, not the next xid to be assigned: a writer that took
        # its xid (and then a seq below a visible row) before this snapshot can still hold an xid at or
        # above it, and would be settled as a hole while it runs. A fresh xid taken after the snapshot is
        # above every xid assigned before it, so it is a safe mark. It costs one xid per read that sees
        # a gap. The statement is its own transaction (autocommit): it wrote nothing, so its commit is
        # not flushed to disk, and it holds nothing back.
        high = max(high, session.current_xid())
    return VisibleRows(rows, Horizon(low=low, high=high))


def _has_gap(after: int, rows: tuple[OutboxRow, ...]) -> bool:
    """Whether the visible seqs after `after` skip one (rows come in seq order)."""
    return bool(rows) and rows[-1].seq - after != len(rows)


# Prepared (two-phase) transactions hold the horizon too but have no session in pg_stat_activity: a
# forgotten one stalls the bridge for good, so it is listed with the command that ends it.
_HOLDERS = text(
    """
    SELECT pid, backend_xid::text AS xid, xact_start AS started_at, state, application_name,
           client_addr::text AS client, left(query, 300) AS query, age(backend_xid) AS xid_age
    FROM pg_stat_activity
    WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
    UNION ALL
    SELECT NULL, transaction::text, prepared,
           'prepared: end it with COMMIT PREPARED or ROLLBACK PREPARED ' || quote_literal(gid),
           NULL, NULL, NULL, age(transaction)
    FROM pg_prepared_xacts
    ORDER BY xid_age DESC
    LIMIT :limit
    """
)


def horizon_holders(conn: Connection, limit: int = 5) -> list[HorizonHolder]:
    """The oldest running or prepared transactions that have a transaction id, oldest first: the ones a
    pending hole waits for. Query texts of other users show only with `pg_read_all_stats`."""
    try:
        result = conn.execute(_HOLDERS, {"limit": limit}).mappings().all()
    except DBAPIError as exc:
        raise store_error(exc, "listing the transactions that hold the horizon (pg_stat_activity)") from exc
    return [
        HorizonHolder(
            pid=None if row["pid"] is None else int(row["pid"]),
            xid=row["xid"],
            started_at=row["started_at"],
            state=row["state"],
            application_name=row["application_name"],
            client=row["client"],
            query=row["query"],
            reported=POSTGRES_FIELDS,
        )
        for row in result
    ]


#: Socket reads of pending notifications before a read of the outbox (`PostgresReader._discard_notifies`).
_MAX_NOTIFY_READS = 100


class PostgresReader(SqlReader[PostgresSession]):
    """PostgreSQL tail: the snapshot horizon, and LISTEN/NOTIFY to wake up within milliseconds."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, self._read_session, read_visible)
        self._listen: Any = None
        self._reads: Connection | None = None
        #: The read sent after a full batch for the `after` and `limit` the caller will most likely ask next: the
        #: server runs it while the caller sends the batch it has.
        self._ahead: ReadAhead | None = None
        #: The answer of the read ahead taken for the read under way, for its session.
        self._taken: list[tuple[Any, ...]] | None = None
        #: Reads ahead taken as they were, and thrown away (the caller asked for another `after` or `limit`, or
        #: the read failed and was done again).
        self.reads_ahead = {"taken": 0, "discarded": 0}

    @contextmanager
    def _read_session(self) -> Iterator[PostgresSession]:
        """The reads' own connection, kept between reads, in autocommit: a caught-up bridge reads hundreds of
        times a second, and a connection checked out of the pool per read cost three more round trips each
        (the pool's ping, BEGIN, and the ROLLBACK on its return) and most of PostgreSQL's work for the bridge.
        A read that fails drops the connection; the next read connects again (and the pool pings then)."""
        if self._reads is None:
            self._reads = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            yield PostgresSession(self._reads, self._taken)
        except BaseException:
            self._drop_reads()
            raise

    def _drop_reads(self) -> None:
        if self._reads is not None:
            with contextlib.suppress(Exception):  # a connection that failed may be broken already
                self._reads.close()
        self._reads = None

    def horizon_holder(self) -> HorizonHolder | None:
        """The oldest running transaction, when a hole is waiting on it; None when nothing blocks."""
        waiting_on = self.waiting_on
        if waiting_on is None:
            return None
        holders: list[HorizonHolder] = self.table.run("listing horizon holders",
                                                      lambda c: horizon_holders(c, limit=1))
        if not holders:
            return None
        return replace(holders[0], waiting_on_seq=waiting_on.first)

    def poll(self, after: int, limit: int) -> Batch:
        # This read answers every notification that arrived before it: take them off the LISTEN connection.
        # A busy bridge seldom waits, and notifications left unread fill the connection's buffers until the
        # listening backend blocks, and with it the server's notify queue, which every writer's NOTIFY uses.
        self._discard_notifies()
        reused = self._reads is not None
        try:
            batch = super().poll(after, limit)
        except TransientStoreError as exc:
            # The kept connection died while idle (a server restart, a failover, an idle timeout): what the
            # pool's ping on check-out used to catch. A failed read changes nothing, so read again at once
            # on a new connection; only when that fails too is it the database's failure.
            lost = exc.__cause__
            if not (reused and isinstance(lost, DBAPIError) and lost.connection_invalidated):
                raise
            log.info("the outbox read connection was lost between reads; reading again on a new one",
                     extra={"error": str(exc)})
            batch = super().poll(after, limit)
        if len(batch.rows) == limit and self._reads is not None:
            # A backlog: the caller will most likely send these rows and ask for the next `limit` after them.
            try:
                self._ahead = ReadAhead(self._reads, batch.rows[-1].seq, limit)
            except Exception as exc:  # noqa: BLE001 - the next read connects again, and reports any failure
                self._ahead_failed(exc)
        return batch

    def _fetch(self, after: int, limit: int) -> VisibleRows:
        # Only a read ahead of exactly this `after` and `limit` answers it; any other is thrown away unseen. No
        # read touches the hole rule until it is taken here, in the caller's order, so one thrown away (or
        # failed) changes nothing, and the one taken is as if read now, from a snapshot taken after the last.
        ahead = self._ahead
        if ahead is not None and (ahead.after, ahead.limit) == (after, limit):
            self._ahead = None
            try:
                self._taken = ahead.take()
                self.reads_ahead["taken"] += 1
            except Exception as exc:  # noqa: BLE001 - read again below, on a new connection
                self.reads_ahead["discarded"] += 1
                self._ahead_failed(exc)
        elif ahead is not None:
            self.reads_ahead["discarded"] += 1
            self._drop_ahead()
        try:
            return super()._fetch(after, limit)
        finally:
            self._taken = None

    def _ahead_failed(self, exc: Exception) -> None:
        log.info("a read ahead failed; the outbox is read again on a new connection", extra={"error": str(exc)})
        if self._reads is not None:
            with contextlib.suppress(Exception):  # already broken
                self._reads.invalidate()
        self._drop_reads()

    def _drop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                ahead.discard()
            except Exception as exc:  # noqa: BLE001 - the next read connects again
                self._ahead_failed(exc)

    def forget_holes(self) -> None:
        # The caller restarts lower down: the read ahead answers nothing it will ask.
        self._drop_ahead()
        super().forget_holes()

    def _discard_notifies(self) -> None:
        if self._listen is None:
            return
        try:
            # Each call takes what one read of the socket brings, without waiting: repeat until one brings none
            # (bounded, should commits keep coming faster than this loop turns).
            for _ in range(_MAX_NOTIFY_READS):
                # The socket check first: cheaper than psycopg's notifies() when nothing came (most reads).
                readable, _, _ = io_select.select([self._listen.fileno()], [], [], 0)
                if not readable or not any(True for _ in self._listen.notifies(timeout=0)):
                    break
        except Exception as exc:  # noqa: BLE001 - a broken LISTEN connection only costs latency
            self._listener_lost(exc)

    def wait(self, timeout: float) -> None:
        """Block until a NOTIFY from the insert trigger or the timeout; falls back to sleeping."""
        try:
            if self._listen is None:
                self._listen = self._connect_listener()
            for _ in self._listen.notifies(timeout=timeout, stop_after=1):
                pass
        except Exception as exc:  # noqa: BLE001 - a broken LISTEN connection only costs latency
            self._listener_lost(exc)
            super().wait(timeout)

    def _connect_listener(self) -> Any:
        import psycopg

        url = self.engine.url.set(drivername="postgresql")
        named: dict[str, Any] = application_name(url)
        conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True, connect_timeout=5,
                               **named)
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return conn

    def _listener_lost(self, exc: Exception) -> None:
        log.warning("LISTEN connection lost; polling until it is back", extra={"error": str(exc)})
        self._drop_listener()

    def _drop_listener(self) -> None:
        if self._listen is not None:
            with contextlib.suppress(Exception):  # already broken
                self._listen.close()
        self._listen = None

    def close(self) -> None:
        self._drop_ahead()
        log.debug("reads ahead", extra=dict(self.reads_ahead))
        self._drop_listener()
        self._drop_reads()
        super().close()
