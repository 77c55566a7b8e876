"""Models of each dialect's commit-visibility rules, small enough to enumerate schedules over.

Each model keeps what the database itself keeps (transaction ids or rowversion stamps, the seq
generator, committed rows) and answers the same statements as that dialect's reader session in
`bridge.store`, so the real `read_visible` of each dialect, the real `TailReader`, hole rule and ack
tracker run on top of it. A `Faults` plan breaks a read at any step: opening the connection, before
or after any statement (an answer lost on the way back), and at the closing ROLLBACK.

- `PostgresModel`: xids, `nextval`, snapshots (`pg_snapshot_xmin`, `pg_snapshot_xmax` =
  latestCompletedXid + 1), `pg_current_xact_id()`; writers take their xid before their seq
  (`outbox_next_seq`), or, with `seq_before_xid`, the other way round (a plain `nextval` default).
- `MssqlModel`: rowversion stamps (`@@DBTS`, `MIN_ACTIVE_ROWVERSION()`), READPAST reads that skip
  rows still locked; writers stamp a ticket before drawing seqs from a SEQUENCE (the outbox's insert
  trigger), or, with `identity_first`, draw an IDENTITY before their row is stamped (the old table).
- `SqliteModel`: one writer at a time, AUTOINCREMENT seqs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import OperationalError

from bridge.core.holes import Horizon
from bridge.core.records import OutboxRow
from bridge.store import mssql, postgres, sqlite
from bridge.store.reader import TailReader

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def row(seq: int) -> OutboxRow:
    return OutboxRow(seq, f"e{seq}", "order", f"a{seq % 3}", "Happened", "{}", None, NOW, 1)


class ConnectionCut(OperationalError):
    """What the driver raises when the network drops the connection."""

    def __init__(self, where: str) -> None:
        super().__init__(where, {}, Exception(f"server closed the connection unexpectedly ({where})"))
        self.connection_invalidated = True


@dataclass
class Faults:
    """Where the next read breaks: 'connect', 'before:N' / 'after:N' (statement N of the read), or
    'release' (the closing ROLLBACK). One fault per read; `None` reads cleanly."""

    plan: str | None = None
    done: list[str] = field(default_factory=list)

    def check(self, point: str) -> None:
        if self.plan == point:
            self.plan = None
            self.done.append(point)
            raise ConnectionCut(point)


@dataclass
class Txn:
    """A writer's transaction: its stamp (xid or rowversions) and the seqs it drew."""

    name: int
    stamps: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    pending_seqs: list[int] = field(default_factory=list)  # drawn, row not yet written (IDENTITY first)


class Model:
    """What every dialect model shares: seqs, committed rows, running writers, and the reader's session."""

    dialect = ""

    def __init__(self) -> None:
        self.next_seq = 1
        self.committed: dict[int, OutboxRow] = {}
        self.aborted: set[int] = set()
        self.running: dict[int, Txn] = {}
        self.faults = Faults()
        self._names = 0
        self._statement = 0

    # writers ----------------------------------------------------------------------------------

    def begin(self) -> Txn | None:
        self._names += 1
        txn = Txn(self._names)
        self.running[txn.name] = txn
        return txn

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def draw(self, txn: Txn) -> None:
        txn.seqs.append(self.take_seq())

    def finish(self, txn: Txn, commit: bool) -> None:
        del self.running[txn.name]
        if commit:
            self.committed.update((seq, row(seq)) for seq in txn.seqs)
        else:
            self.aborted.update(txn.seqs)

    def writer_steps(self, txn: Txn) -> list[str]:
        """What a running writer may do next."""
        return ["write", "commit", "rollback"]

    def step(self, txn: Txn, action: str) -> None:
        if action == "commit":
            self.finish(txn, True)
        elif action == "rollback":
            self.finish(txn, False)
        else:
            self.write(txn)

    def write(self, txn: Txn) -> None:
        raise NotImplementedError

    def in_progress_seqs(self) -> set[int]:
        return {seq for txn in self.running.values() for seq in txn.seqs + txn.pending_seqs}

    # the reader's session ------------------------------------------------------------------------

    def statement(self) -> None:
        """Called at each statement of a read: a fault may strike before it."""
        self._statement += 1
        self.faults.check(f"before:{self._statement}")

    def answered(self) -> None:
        self.faults.check(f"after:{self._statement}")

    @contextmanager
    def session(self) -> Iterator[Any]:
        self._statement = 0
        self.faults.check("connect")
        try:
            yield self
        finally:
            self.end_read()
        self.faults.check("release")

    def end_read(self) -> None:
        """The read's transaction ends (rolled back, or aborted by the server when the connection died)."""

    def visible_after(self, after: int, limit: int) -> tuple[OutboxRow, ...]:
        return tuple(self.committed[seq] for seq in sorted(self.committed) if seq > after)[:limit]

    def reader(self) -> TailReader[Any]:
        raise NotImplementedError


class PostgresModel(Model):
    dialect = "postgresql"

    def __init__(self, seq_before_xid: bool = False) -> None:
        super().__init__()
        self.seq_before_xid = seq_before_xid
        self.next_xid = 100
        self.latest_completed = 99
        self.reader_xid: int | None = None

    def _take_xid(self) -> int:
        xid = self.next_xid
        self.next_xid += 1
        return xid

    def write(self, txn: Txn) -> None:
        if self.seq_before_xid and not txn.stamps and not txn.pending_seqs:
            # nextval() first, the xid only when the row is written: the step a plain default takes.
            txn.pending_seqs.append(self.take_seq())
            return
        if not txn.stamps:
            txn.stamps.append(self._take_xid())  # outbox_next_seq: the xid before nextval
        txn.seqs.extend(txn.pending_seqs)
        txn.pending_seqs.clear()
        self.draw(txn)

    def writer_steps(self, txn: Txn) -> list[str]:
        # A transaction still holding a drawn seq without its row cannot commit yet.
        return ["write"] if txn.pending_seqs else ["write", "commit", "rollback"]

    def finish(self, txn: Txn, commit: bool) -> None:
        super().finish(txn, commit)
        if txn.stamps:
            self.latest_completed = max(self.latest_completed, txn.stamps[0])

    # PostgresSession's statements
    def snapshot_rows(self, after: int, limit: int) -> tuple[int, int, tuple[OutboxRow, ...]]:
        self.statement()
        xmax = self.latest_completed + 1
        running = [txn.stamps[0] for txn in self.running.values() if txn.stamps]
        if self.reader_xid is not None:
            running.append(self.reader_xid)
        xmin = min([xmax, *running])
        result = xmin, xmax, self.visible_after(after, limit)
        self.answered()
        return result

    def current_xid(self) -> int:
        self.statement()
        if self.reader_xid is None:
            self.reader_xid = self._take_xid()
        xid = self.reader_xid
        self.answered()
        return xid

    def end_read(self) -> None:
        if self.reader_xid is not None:
            self.latest_completed = max(self.latest_completed, self.reader_xid)
            self.reader_xid = None

    def reader(self) -> TailReader[Any]:
        return TailReader(self.session, postgres.read_visible)


class MssqlModel(Model):
    dialect = "mssql"

    def __init__(self, identity_first: bool = False) -> None:
        super().__init__()
        self.identity_first = identity_first
        self.dbts = 1000  # the last rowversion handed out

    def _stamp(self, txn: Txn) -> None:
        self.dbts += 1
        txn.stamps.append(self.dbts)

    def write(self, txn: Txn) -> None:
        if self.identity_first:
            if txn.pending_seqs:
                # The row is written now: stamped with the next rowversion, after its IDENTITY was drawn.
                self._stamp(txn)
                txn.seqs.extend(txn.pending_seqs)
                txn.pending_seqs.clear()
            else:
                txn.pending_seqs.append(self.take_seq())
            return
        # The insert trigger: a ticket row first (the transaction now holds an active stamp), then the
        # seqs from the SEQUENCE, then the rows, each stamped again.
        if not txn.stamps:
            self._stamp(txn)
        for _ in range(1 + txn.name % 2):  # a multi-row INSERT ... SELECT draws several at once
            self.draw(txn)
            self._stamp(txn)

    def writer_steps(self, txn: Txn) -> list[str]:
        return ["write"] if txn.pending_seqs else ["write", "commit", "rollback"]

    # MssqlSession's statements
    def min_active_rowversion(self) -> int:
        self.statement()
        active = [stamp for txn in self.running.values() for stamp in txn.stamps]
        value = min(active, default=self.dbts + 1)
        self.answered()
        return value

    def rows_after(self, after: int, limit: int) -> tuple[OutboxRow, ...]:
        self.statement()
        rows = self.visible_after(after, limit)  # READPAST: rows still locked are skipped, never waited on
        self.answered()
        return rows

    def next_rowversion(self) -> int:
        self.statement()
        value = self.dbts + 1
        self.answered()
        return value

    def reader(self) -> TailReader[Any]:
        return TailReader(self.session, mssql.read_visible)


class SqliteModel(Model):
    dialect = "sqlite"

    def begin(self) -> Txn | None:
        if self.running:
            return None  # one writer at a time: the next one waits for the lock
        return super().begin()

    def write(self, txn: Txn) -> None:
        self.draw(txn)  # AUTOINCREMENT: above every seq ever handed out, even a rolled-back one

    def rows_after(self, after: int, limit: int) -> tuple[OutboxRow, ...]:
        self.statement()
        rows = self.visible_after(after, limit)
        self.answered()
        return rows

    def reader(self) -> TailReader[Any]:
        return TailReader(self.session, sqlite.read_visible)


MODELS: dict[str, type[Model]] = {"postgresql": PostgresModel, "mssql": MssqlModel, "sqlite": SqliteModel}

#: Every point a read can break at; statements are numbered from 1 (PostgreSQL's read has up to 2,
#: SQL Server's 3, SQLite's 1; a point past the read's last statement never strikes).
FAULT_POINTS: tuple[str | None, ...] = (
    None, "connect", "before:1", "after:1", "before:2", "after:2", "before:3", "after:3", "release",
)

__all__ = ["FAULT_POINTS", "MODELS", "ConnectionCut", "Horizon", "Model", "MssqlModel", "PostgresModel",
           "SqliteModel", "row"]
