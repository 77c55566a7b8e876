"""PostgreSQL specifics of the store: xid before seq, the snapshot-horizon read, holes, NOTIFY, holders."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url

from bridge import migrate
from bridge.core.holes import SeqRange
from bridge.schema import NOTIFY_CHANNEL
from bridge.store import Batch, postgres
from tests.faultproxy import Cut, FaultProxy, Moment
from tests.support import Tail

pytestmark = pytest.mark.integration

INSERT = text(
    "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
    "VALUES (:event_id, 'order', 'a-1', 'OrderPlaced', '{}') RETURNING seq"
)


@pytest.fixture()
def engine(postgres_url: str) -> Iterator[Engine]:
    migrate.upgrade(postgres_url)
    engine = create_engine(postgres_url, pool_size=6)
    yield engine
    engine.dispose()


def _libpq(postgres_url: str) -> str:
    """The URL for psycopg itself, without SQLAlchemy's driver name."""
    return make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def _listening_reader(postgres_url: str) -> Iterator[tuple[Engine, postgres.PostgresReader]]:
    """The bridge's engine and PostgreSQL reader on a migrated outbox, its LISTEN connection open, as the daemon's
    first idle wait leaves it."""
    from bridge.store.engine import make_engine, make_reader

    migrate.upgrade(postgres_url)
    engine = make_engine(postgres_url)
    reader = make_reader(engine)
    assert isinstance(reader, postgres.PostgresReader)
    try:
        reader.wait(0.01)  # opens the LISTEN connection
        yield engine, reader
    finally:
        reader.close()
        engine.dispose()


def insert(conn: Connection, event_id: str) -> int:
    return int(conn.execute(INSERT, {"event_id": event_id}).scalar_one())


def poll(engine: Engine, tracker: Tail) -> Batch:
    return tracker.poll(limit=100)


def poll_until_settled(engine: Engine, tracker: Tail, timeout: float = 30.0) -> Batch:
    """Settling waits for every older transaction in the cluster, including other tests' ones: retry."""
    deadline = time.monotonic() + timeout
    while True:
        step = poll(engine, tracker)
        if step.settled or time.monotonic() > deadline:
            return step
        time.sleep(0.05)


def test_a_transaction_takes_its_xid_before_its_seq(engine: Engine) -> None:
    with engine.begin() as conn:
        assert conn.scalar(text("SELECT pg_current_xact_id_if_assigned()")) is None
        conn.scalar(text("SELECT outbox_next_seq()"))
        assert conn.scalar(text("SELECT pg_current_xact_id_if_assigned()")) is not None
    with engine.begin() as conn:
        insert(conn, "e-1")
        own = conn.scalar(text("SELECT pg_current_xact_id()::text"))
        assert conn.scalar(text("SELECT txid::text FROM domain_events WHERE event_id = 'e-1'")) == own


def test_the_seq_function_finds_its_sequence_whatever_the_callers_search_path(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL search_path = pg_catalog"))
        conn.execute(
            text(
                "INSERT INTO public.domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                "VALUES ('e-1', 'order', 'a-1', 'OrderPlaced', '{}')"
            )
        )
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT seq FROM domain_events")) == 1


def test_read_visible_gives_the_horizon_even_when_no_row_is_visible(engine: Engine) -> None:
    with engine.connect() as conn:
        visible = postgres.read_visible(postgres.PostgresSession(conn), after=0, limit=10)
    assert visible.rows == ()
    assert 0 < visible.horizon.low <= visible.horizon.high


def test_a_late_commit_holds_later_rows_back_and_is_then_delivered_first(engine: Engine) -> None:
    tracker = Tail(postgres.PostgresReader(engine))
    with engine.connect() as slow:
        slow.begin()
        slow_seq = insert(slow, "slow")
        with engine.begin() as fast:
            insert(fast, "fast")
        waiting = poll(engine, tracker)
        assert waiting.rows == ()
        assert waiting.waiting_on == SeqRange(slow_seq, slow_seq)
        slow.commit()
    done = poll(engine, tracker)
    assert [row.event_id for row in done.rows] == ["slow", "fast"]
    assert done.settled == ()
    assert tracker.cursor == slow_seq + 1


def test_a_rolled_back_seq_becomes_a_settled_hole(engine: Engine) -> None:
    tracker = Tail(postgres.PostgresReader(engine))
    with engine.connect() as doomed:
        doomed.begin()
        hole = insert(doomed, "doomed")
        with engine.begin() as fast:
            insert(fast, "fast")
        assert poll(engine, tracker).waiting_on == SeqRange(hole, hole)
        doomed.rollback()
    step = poll_until_settled(engine, tracker)
    assert step.settled == (SeqRange(hole, hole),)
    assert [row.event_id for row in step.rows] == ["fast"]


def test_an_older_running_transaction_keeps_the_hole_pending_and_is_named(engine: Engine) -> None:
    tracker = Tail(postgres.PostgresReader(engine))
    with engine.connect() as older, engine.connect() as doomed:
        older.begin()
        older.execute(text("SET LOCAL application_name = 'older-report'"))
        older_xid = older.scalar(text("SELECT pg_current_xact_id()::text"))
        older_pid = older.scalar(text("SELECT pg_backend_pid()"))
        doomed.begin()
        hole = insert(doomed, "doomed")
        with engine.begin() as fast:
            insert(fast, "fast")
        assert poll(engine, tracker).waiting_on == SeqRange(hole, hole)
        doomed.rollback()
        # The hole's writer is gone, but an older transaction still holds the horizon: it may not settle yet.
        assert poll(engine, tracker).waiting_on == SeqRange(hole, hole)
        with engine.connect() as conn:
            holders = {holder.pid: holder for holder in postgres.horizon_holders(conn, limit=50)}
        holder = holders[older_pid]
        assert holder.xid is not None and int(holder.xid) == int(older_xid or 0) % 2**32  # xid is 32-bit
        assert holder.application_name == "older-report"
        assert holder.started_at is not None
        older.commit()
    step = poll_until_settled(engine, tracker)
    assert step.settled == (SeqRange(hole, hole),)
    assert [row.event_id for row in step.rows] == ["fast"]


def test_inserts_notify_the_outbox_channel_when_they_commit(engine: Engine, postgres_url: str) -> None:
    with psycopg.connect(_libpq(postgres_url), autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        with engine.connect() as conn:
            conn.begin()
            insert(conn, "n-1")
            insert(conn, "n-2")
            assert list(listener.notifies(timeout=0.3)) == []  # nothing before the commit
            conn.commit()
        notices = list(listener.notifies(timeout=5, stop_after=1))
        assert [(notice.channel, notice.payload) for notice in notices] == [(NOTIFY_CHANNEL, "")]


def test_a_forgotten_prepared_transaction_is_named_with_the_command_that_ends_it(engine: Engine) -> None:
    with engine.connect() as conn:
        if int(conn.scalar(text("SHOW max_prepared_transactions")) or 0) == 0:
            pytest.skip("this PostgreSQL has max_prepared_transactions = 0, so no transaction can be prepared")
    with engine.connect() as conn:
        conn.begin()
        # Any transaction with an id holds the horizon. (An outbox insert cannot be prepared: the insert
        # trigger's NOTIFY forbids PREPARE TRANSACTION, so two-phase writers hold it from other tables.)
        conn.exec_driver_sql("SELECT pg_current_xact_id()")
        conn.exec_driver_sql("PREPARE TRANSACTION 'outbox-test-gid'")
        conn.rollback()  # the session's own transaction is gone; the prepared one lives on
    try:
        with engine.connect() as conn:
            holders = postgres.horizon_holders(conn, limit=50)
        prepared = [holder for holder in holders if holder.pid is None]
        assert prepared and "ROLLBACK PREPARED 'outbox-test-gid'" in (prepared[0].state or "")
    finally:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ROLLBACK PREPARED 'outbox-test-gid'")


@pytest.mark.parametrize(("query", "expected"),
                         [("", "outbox-bridge"), ("?application_name=billing-relay", "billing-relay")])
def test_the_bridges_sessions_are_named_in_pg_stat_activity(postgres_url: str, query: str, expected: str) -> None:
    from bridge.store.engine import make_engine, make_reader

    migrate.upgrade(postgres_url)
    engine = make_engine(postgres_url + query)
    reader = make_reader(engine)
    try:
        with engine.connect() as conn:
            named = conn.execute(text("SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"))
            assert named.scalar_one() == expected
        reader.wait(0.01)  # opens the LISTEN connection
        with engine.connect() as conn:
            listening = conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name AND query LIKE 'LISTEN%' "
                "AND datname = current_database()"),  # not the bridges of tests running beside this one
                {"name": expected}).scalar_one()
        assert listening == 1, "the LISTEN connection carries the same name"
    finally:
        reader.close()
        engine.dispose()


def test_a_read_takes_the_notifications_it_answers_off_the_listen_connection(postgres_url: str) -> None:
    """A busy bridge reads without waiting; the NOTIFYs of the commits it reads must not pile up unread on its
    LISTEN connection (they would fill its buffers, block the listening backend and with it the server's
    notify queue)."""
    with _listening_reader(postgres_url) as (engine, reader):
        for i in range(300):
            with engine.begin() as conn:
                insert(conn, f"n-{i}")
        for _ in range(5):  # reads spaced like a busy bridge's, none of them a wait
            time.sleep(0.2)  # PostgreSQL delivers notifications when the listening backend gets to them
            assert len(reader.poll(0, 1000).rows) == 300
        listen = reader._listen  # what is left on this connection is the behaviour under test
        left = sum(1 for _ in listen.notifies(timeout=0.3))
        assert left == 0, f"{left} notifications left unread after the read that answered them"


def test_a_read_takes_thousands_of_pending_notifications_off_the_listen_connection(postgres_url: str) -> None:
    """Commits that come faster than the reads must not pile up on the LISTEN connection either. Over TLS (which this
    stack's PostgreSQL uses) each commit's notification arrives in a TLS record of its own, and one read of the
    socket takes one record: a drain of at most 100 socket reads left 1,900 of 2,000 behind."""
    with _listening_reader(postgres_url) as (_, reader):
        with psycopg.connect(_libpq(postgres_url), autocommit=True) as writer:
            for _ in range(2000):  # 2,000 commits, one notification each, as 2,000 single-row inserts send
                writer.execute("SELECT pg_notify(%s, '')", (NOTIFY_CHANNEL,))
        time.sleep(1.0)  # PostgreSQL delivers notifications when the listening backend gets to them
        reader.poll(0, 10)
        left = sum(1 for _ in reader._listen.notifies(timeout=0.5))
        assert left == 0, f"{left} of 2,000 notifications left unread after the read that answered them"


def _sessions(engine: Engine, name: str) -> list[tuple[int, str, bool, bool]]:
    """(pid, state, in a transaction, holding a snapshot) of every session named `name`."""
    with engine.connect() as conn:
        return [(int(pid), state, started, held) for pid, state, started, held in conn.execute(text(
            "SELECT pid, state, xact_start IS NOT NULL, backend_xmin IS NOT NULL FROM pg_stat_activity "
            "WHERE application_name = :name ORDER BY pid"), {"name": name})]


def test_a_caught_up_read_is_one_statement_on_a_kept_connection_that_holds_no_snapshot(
    engine: Engine, postgres_url: str
) -> None:
    """A caught-up bridge reads hundreds of times a second. Each read must cost PostgreSQL its one statement, not
    a pool check-out's ping, BEGIN and closing ROLLBACK around it; and between reads the connection must hold no
    transaction or snapshot, which would hold VACUUM back."""
    from bridge.store.engine import make_engine, make_reader

    name = f"reads-{time.monotonic_ns()}"
    server = make_url(postgres_url)
    with FaultProxy((server.host or "127.0.0.1", server.port or 5432)) as proxy:
        reading = make_engine(proxy.url_for(postgres_url + f"?application_name={name}"))
        reader = make_reader(reading)
        try:
            with engine.begin() as conn:
                head = insert(conn, "kept-1")
            assert [row.seq for row in reader.poll(0, 100).rows] == [head]  # the first read connects
            connections = proxy.connections
            proxy.statements.clear()
            for _ in range(20):
                assert reader.poll(head, 100).rows == ()
            statements = dict(proxy.statements)
            assert set(statements) <= {"P SELECT"}, f"only the read itself reaches the server: {statements}"
            assert statements.get("P SELECT", 0) <= 20, statements
            assert proxy.connections == connections, "the reads kept their connection"
            reads = _sessions(engine, name)
            assert [(state, in_transaction, snapshot) for _, state, in_transaction, snapshot in reads] == [
                ("idle", False, False)], f"between reads, an idle connection without a transaction: {reads}"
        finally:
            reader.close()
            reading.dispose()


def test_a_read_connection_lost_between_reads_is_replaced_within_the_next_read(
    engine: Engine, postgres_url: str
) -> None:
    """A server restart or a failover ends the kept connection while it is idle: the next read connects again
    and reads, as the pool's ping on check-out made it do, instead of failing once."""
    from bridge.store.engine import make_engine, make_reader

    name = f"lost-{time.monotonic_ns()}"
    reading = make_engine(postgres_url + f"?application_name={name}")
    reader = make_reader(reading)
    try:
        assert reader.poll(0, 100).rows == ()
        (kept, *_), = _sessions(engine, name)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": kept}).scalar_one()
        with engine.begin() as conn:
            seq = insert(conn, "after-the-loss")
        assert [row.seq for row in reader.poll(0, 100).rows] == [seq]
        assert [pid for pid, *_ in _sessions(engine, name)] != [kept], "a new connection read it"
    finally:
        reader.close()
        reading.dispose()


def test_after_a_full_batch_the_next_read_is_already_under_way_and_any_other_read_ignores_it(
    engine: Engine, postgres_url: str
) -> None:
    """In a backlog the reader sends the read of the next batch before the caller sends the one it has; a
    caller that asks for anything else (it sent fewer rows, it rewinds) gets a read of its own, and the read
    ahead changes nothing."""
    from bridge.store.engine import make_engine, make_reader
    from bridge.store.postgres import PostgresReader

    with engine.begin() as conn:
        seqs = [insert(conn, f"ahead-{i}") for i in range(25)]
    reader = make_reader(make_engine(postgres_url))
    assert isinstance(reader, PostgresReader)
    try:
        assert [r.seq for r in reader.poll(0, 10).rows] == seqs[:10]
        assert [r.seq for r in reader.poll(seqs[9], 10).rows] == seqs[10:20]
        assert reader.reads_ahead == {"taken": 1, "discarded": 0}
        # The caller sent only some of the rows (its window was full): it asks again lower down.
        assert [r.seq for r in reader.poll(seqs[14], 10).rows] == seqs[15:25]
        assert reader.reads_ahead == {"taken": 1, "discarded": 1}
        assert reader.poll(seqs[24], 10).rows == ()  # the read ahead after that full batch: nothing more
        assert reader.reads_ahead == {"taken": 2, "discarded": 1}
        assert reader.poll(seqs[24], 10).rows == ()
        assert reader.reads_ahead == {"taken": 2, "discarded": 1}, "caught up: nothing is read ahead"
    finally:
        reader.close()


def test_a_read_ahead_whose_connection_is_cut_is_read_again_on_a_new_connection(
    engine: Engine, postgres_url: str
) -> None:
    """The read sent ahead waits in the connection until it is taken; when the connection is cut while its
    rows come in, the reader reads the same rows again on a new connection, and the read ahead counts as
    thrown away: the caller gets the same batch, and sees no error."""
    from bridge.store.engine import make_engine, make_reader
    from bridge.store.postgres import PostgresReader

    with engine.begin() as conn:
        seqs = [insert(conn, f"ahead-cut-{i}") for i in range(25)]
    server = make_url(postgres_url)
    # The first result of three rows or more is the first read's, the second the read ahead's.
    cut = Cut(Moment.MID_RESULT, every=2, times=1, after_rows=2)
    with FaultProxy((server.host or "127.0.0.1", server.port or 5432), cut) as proxy:
        reading = make_engine(proxy.url_for(postgres_url))
        reader = make_reader(reading)
        assert isinstance(reader, PostgresReader)
        try:
            assert [r.seq for r in reader.poll(0, 10).rows] == seqs[:10]
            connections = proxy.connections
            assert [r.seq for r in reader.poll(seqs[9], 10).rows] == seqs[10:20]
            assert proxy.cuts[Moment.MID_RESULT] == 1, "the read ahead's rows were cut"
            assert reader.reads_ahead == {"taken": 0, "discarded": 1}
            assert proxy.connections == connections + 1, "read again on a new connection"
            assert [r.seq for r in reader.poll(seqs[19], 10).rows] == seqs[20:25]
            assert reader.reads_ahead == {"taken": 1, "discarded": 1}, "the next read ahead, on the new connection"
        finally:
            reader.close()
            reading.dispose()
