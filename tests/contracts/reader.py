"""The outbox reader contract: what every dialect's `OutboxReader` promises the daemon.

- reads start exactly after the seq the caller passes (the ack tracker's position, the one cursor);
- committed rows come back in seq order; a gap below a visible row is reported as settled only when
  its writer can no longer commit, and always before the row that follows it;
- a read that fails anywhere, even at its closing ROLLBACK, changes nothing: the same read again
  gives the same answer, and no hole is settled by the failure;
- `rows_in` finds rows inside holes settled earlier; `head_seq` and `oldest_after` say where the
  outbox ends and what is oldest after a seq.

`HorizonReaderContract` adds what only outboxes with concurrent writers can show: a late commit
holds later rows back, and its row is then delivered first. Subclass per database with a `backend_url`
fixture (a fresh database); an outbox that is not a database overrides the `writer` and `reader` fixtures.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import pytest
from sqlalchemy import bindparam, create_engine, text
from sqlalchemy.engine import Connection, Engine, RootTransaction
from sqlalchemy.exc import OperationalError

from bridge.core.holes import SeqRange
from bridge.errors import TransientStoreError
from bridge.migrate import upgrade
from bridge.store.engine import make_engine, make_reader
from bridge.store.reader import Batch, OutboxReader

INSERT = text(
    "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
    "VALUES (:e, 'order', :a, 'OrderPlaced', '{}')"
)


class Transaction(Protocol):
    """A writer's transaction, left open until the test ends it."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


class OutboxWriter(Protocol):
    """What applications do to the outbox, as the contract needs it: rows `e-{i}` with keys `a-{i % 3}`."""

    def write(self, count: int, start: int = 0) -> None:
        """`count` rows, from `e-{start}` on, in one committed transaction."""
        ...

    def delete(self, *seqs: int) -> None:
        """Delete committed rows."""
        ...

    def begin(self, index: int) -> Transaction:
        """Insert the row `e-{index}` in a transaction left open."""
        ...


class SqlWriter:
    """Plain SQL on the outbox table, as any application writes it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._connections: list[Connection] = []

    @staticmethod
    def insert(conn: Connection, count: int, start: int = 0) -> None:
        for i in range(start, start + count):
            conn.execute(INSERT, {"e": f"e-{i}", "a": f"a-{i % 3}"})

    def write(self, count: int, start: int = 0) -> None:
        with self.engine.begin() as conn:
            self.insert(conn, count, start)

    def delete(self, *seqs: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(text("DELETE FROM domain_events WHERE seq IN :seqs")
                         .bindparams(bindparam("seqs", expanding=True)), {"seqs": list(seqs)})

    def begin(self, index: int) -> Transaction:
        conn = self.engine.connect()
        self._connections.append(conn)
        transaction = conn.begin()
        self.insert(conn, 1, start=index)
        return _OpenTransaction(conn, transaction)

    def close(self) -> None:
        """End the transactions a failed test left open (closing rolls back), so the database can go."""
        for conn in self._connections:
            conn.close()


class _OpenTransaction:
    def __init__(self, conn: Connection, transaction: RootTransaction) -> None:
        self._conn = conn
        self._transaction = transaction

    def commit(self) -> None:
        self._transaction.commit()
        self._conn.close()

    def rollback(self) -> None:
        self._transaction.rollback()
        self._conn.close()


def poll_until(reader: OutboxReader, after: int, done: Any, timeout: float = 30.0) -> Batch:
    """Poll until `done(batch)`: settling waits for every older transaction of the server."""
    deadline = time.monotonic() + timeout
    while True:
        batch = reader.poll(after, 100)
        if done(batch) or time.monotonic() > deadline:
            return batch
        time.sleep(0.05)


class ReaderContract:
    """Runs against the outbox of a subclass's `writer` and `reader` fixtures: by default the database a
    subclass's `backend_url` fixture names, written with plain SQL and read by its dialect's reader."""

    @pytest.fixture()
    def backend_url(self) -> str:
        raise NotImplementedError("a backend's subclass gives its database URL")

    @pytest.fixture()
    def writer(self, backend_url: str) -> Iterator[OutboxWriter]:
        upgrade(backend_url)
        engine = create_engine(backend_url)
        writer = SqlWriter(engine)
        yield writer
        writer.close()
        engine.dispose()

    @pytest.fixture()
    def reader(self, writer: OutboxWriter, backend_url: str) -> Iterator[OutboxReader]:
        reader = make_reader(make_engine(backend_url))
        yield reader
        reader.close()

    def test_committed_rows_come_in_seq_order_starting_right_after_the_given_seq(
        self, writer: OutboxWriter, reader: OutboxReader
    ) -> None:
        writer.write(10)
        assert [row.seq for row in reader.poll(0, 100).rows] == list(range(1, 11))
        assert [row.seq for row in reader.poll(6, 100).rows] == [7, 8, 9, 10]
        assert [row.seq for row in reader.poll(2, 3).rows] == [3, 4, 5]
        assert reader.poll(10, 100).rows == ()

    def test_a_deleted_seq_is_settled_before_the_row_after_it(self, writer: OutboxWriter, reader: OutboxReader) -> None:
        writer.write(5)
        writer.delete(2, 3)
        batch = poll_until(reader, 1, lambda b: bool(b.settled))
        assert batch.settled == (SeqRange(2, 3),)
        assert [row.seq for row in batch.rows] == [4, 5]
        assert next(iter(batch.in_order())) == SeqRange(2, 3)

    def test_a_read_that_fails_at_its_closing_rollback_changes_nothing(
        self, writer: OutboxWriter, reader: OutboxReader
    ) -> None:
        writer.write(6)
        writer.delete(3)
        real_session = reader._session  # type: ignore[attr-defined]

        @contextmanager
        def cut_at_release() -> Iterator[Any]:
            with real_session() as session:
                yield session
            raise OperationalError("ROLLBACK", {}, Exception("server closed the connection unexpectedly"))

        reader._session = cut_at_release  # type: ignore[attr-defined]
        with pytest.raises(TransientStoreError):
            reader.poll(0, 100)
        reader._session = real_session  # type: ignore[attr-defined]
        batch = poll_until(reader, 0, lambda b: bool(b.settled))
        assert [row.seq for row in batch.rows] == [1, 2, 4, 5, 6]
        assert batch.settled == (SeqRange(3, 3),)

    def test_rows_in_finds_rows_inside_holes_settled_earlier(self, writer: OutboxWriter, reader: OutboxReader) -> None:
        writer.write(8)
        assert reader.rows_in([SeqRange(2, 3), SeqRange(6, 6), SeqRange(20, 30)]) == [2, 3, 6]
        assert reader.rows_in([]) == []

    def test_head_and_oldest_after(self, writer: OutboxWriter, reader: OutboxReader) -> None:
        assert reader.head_seq() == 0 and reader.oldest_after(0) is None
        writer.write(4)
        assert reader.head_seq() == 4
        oldest = reader.oldest_after(2)
        assert oldest is not None and oldest.seq == 3 and oldest.occurred_at.tzinfo is not None


class HorizonReaderContract(ReaderContract):
    """Outboxes where writers commit concurrently, out of seq order (PostgreSQL, SQL Server, in memory)."""

    def test_a_late_commit_holds_later_rows_back_and_is_then_delivered_first(
        self, writer: OutboxWriter, reader: OutboxReader
    ) -> None:
        slow = writer.begin(0)
        writer.write(1, start=1)
        waiting = reader.poll(0, 100)
        assert waiting.rows == () and waiting.settled == ()
        assert waiting.waiting_on == SeqRange(1, 1)
        slow.commit()
        done = reader.poll(0, 100)
        assert [row.event_id for row in done.rows] == ["e-0", "e-1"]
        assert done.settled == ()

    def test_a_rolled_back_seq_is_settled_only_after_its_writer_ended(
        self, writer: OutboxWriter, reader: OutboxReader
    ) -> None:
        doomed = writer.begin(0)
        writer.write(1, start=1)
        for _ in range(3):
            assert reader.poll(0, 100).settled == ()
        doomed.rollback()
        batch = poll_until(reader, 0, lambda b: bool(b.settled))
        assert batch.settled == (SeqRange(1, 1),)
        assert [row.event_id for row in batch.rows] == ["e-1"]
