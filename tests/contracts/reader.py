"""The outbox reader contract: what every dialect's `OutboxReader` promises the daemon.

- reads start exactly after the seq the caller passes (the ack tracker's position, the one cursor);
- committed rows come back in seq order; a gap below a visible row is reported as settled only when
  its writer can no longer commit, and always before the row that follows it;
- a read that fails anywhere, even at its closing ROLLBACK, changes nothing: the same read again
  gives the same answer, and no hole is settled by the failure;
- `rows_in` finds rows inside holes settled earlier; `head_seq` and `oldest_after` say where the
  outbox ends and what is oldest after a seq.

`HorizonReaderContract` adds what only databases with concurrent writers can show: a late commit
holds later rows back, and its row is then delivered first. Subclass per backend with a `backend_url`
fixture (a fresh database).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine
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


def poll_until(reader: OutboxReader, after: int, done: Any, timeout: float = 30.0) -> Batch:
    """Poll until `done(batch)`: settling waits for every older transaction of the server."""
    deadline = time.monotonic() + timeout
    while True:
        batch = reader.poll(after, 100)
        if done(batch) or time.monotonic() > deadline:
            return batch
        time.sleep(0.05)


class ReaderContract:
    """Runs against the database a subclass's `backend_url` fixture names."""

    @pytest.fixture()
    def backend_url(self) -> str:
        raise NotImplementedError("a backend's subclass gives its database URL")

    @pytest.fixture()
    def writer(self, backend_url: str) -> Iterator[Engine]:
        upgrade(backend_url)
        engine = create_engine(backend_url)
        yield engine
        engine.dispose()

    @pytest.fixture()
    def reader(self, writer: Engine, backend_url: str) -> Iterator[OutboxReader]:
        reader = make_reader(make_engine(backend_url))
        yield reader
        reader.close()

    @staticmethod
    def insert(conn: Connection, count: int, start: int = 0) -> None:
        for i in range(start, start + count):
            conn.execute(INSERT, {"e": f"e-{i}", "a": f"a-{i % 3}"})

    def test_committed_rows_come_in_seq_order_starting_right_after_the_given_seq(
        self, writer: Engine, reader: OutboxReader
    ) -> None:
        with writer.begin() as conn:
            self.insert(conn, 10)
        assert [row.seq for row in reader.poll(0, 100).rows] == list(range(1, 11))
        assert [row.seq for row in reader.poll(6, 100).rows] == [7, 8, 9, 10]
        assert [row.seq for row in reader.poll(2, 3).rows] == [3, 4, 5]
        assert reader.poll(10, 100).rows == ()

    def test_a_deleted_seq_is_settled_before_the_row_after_it(self, writer: Engine, reader: OutboxReader) -> None:
        with writer.begin() as conn:
            self.insert(conn, 5)
            conn.execute(text("DELETE FROM domain_events WHERE seq IN (2, 3)"))
        batch = poll_until(reader, 1, lambda b: bool(b.settled))
        assert batch.settled == (SeqRange(2, 3),)
        assert [row.seq for row in batch.rows] == [4, 5]
        assert next(iter(batch.in_order())) == SeqRange(2, 3)

    def test_a_read_that_fails_at_its_closing_rollback_changes_nothing(
        self, writer: Engine, reader: OutboxReader
    ) -> None:
        with writer.begin() as conn:
            self.insert(conn, 6)
            conn.execute(text("DELETE FROM domain_events WHERE seq = 3"))
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

    def test_rows_in_finds_rows_inside_holes_settled_earlier(self, writer: Engine, reader: OutboxReader) -> None:
        with writer.begin() as conn:
            self.insert(conn, 8)
        assert reader.rows_in([SeqRange(2, 3), SeqRange(6, 6), SeqRange(20, 30)]) == [2, 3, 6]
        assert reader.rows_in([]) == []

    def test_head_and_oldest_after(self, writer: Engine, reader: OutboxReader) -> None:
        assert reader.head_seq() == 0 and reader.oldest_after(0) is None
        with writer.begin() as conn:
            self.insert(conn, 4)
        assert reader.head_seq() == 4
        oldest = reader.oldest_after(2)
        assert oldest is not None and oldest.seq == 3 and oldest.occurred_at.tzinfo is not None


class HorizonReaderContract(ReaderContract):
    """Databases where writers commit concurrently, out of seq order (PostgreSQL, SQL Server)."""

    def test_a_late_commit_holds_later_rows_back_and_is_then_delivered_first(
        self, writer: Engine, reader: OutboxReader
    ) -> None:
        with writer.connect() as slow:
            slow.begin()
            self.insert(slow, 1, start=0)
            with writer.begin() as fast:
                self.insert(fast, 1, start=1)
            waiting = reader.poll(0, 100)
            assert waiting.rows == () and waiting.settled == ()
            assert waiting.waiting_on == SeqRange(1, 1)
            slow.commit()
        done = reader.poll(0, 100)
        assert [row.event_id for row in done.rows] == ["e-0", "e-1"]
        assert done.settled == ()

    def test_a_rolled_back_seq_is_settled_only_after_its_writer_ended(
        self, writer: Engine, reader: OutboxReader
    ) -> None:
        with writer.connect() as doomed:
            doomed.begin()
            self.insert(doomed, 1, start=0)
            with writer.begin() as fast:
                self.insert(fast, 1, start=1)
            for _ in range(3):
                assert reader.poll(0, 100).settled == ()
            doomed.rollback()
        batch = poll_until(reader, 0, lambda b: bool(b.settled))
        assert batch.settled == (SeqRange(1, 1),)
        assert [row.event_id for row in batch.rows] == ["e-1"]
