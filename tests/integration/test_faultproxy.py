"""The fault proxy against real PostgreSQL and psycopg: each moment is cut where it says, and only there."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from tests.faultproxy import Cut, FaultProxy, Moment


@contextmanager
def _proxy(url: str, *cuts: Cut) -> Iterator[FaultProxy]:
    server = make_url(url)
    with FaultProxy((server.host or "127.0.0.1", server.port or 5432), *cuts) as proxy:
        yield proxy
    assert not [t.name for t in threading.enumerate() if t.name.startswith("faultproxy")], "no thread outlives it"


def test_a_cut_rollback_fails_the_end_of_a_read_whose_rows_were_already_fetched(postgres_url: str) -> None:
    with _proxy(postgres_url) as proxy:
        engine = create_engine(proxy.url_for(postgres_url), pool_pre_ping=True)
        with engine.connect() as conn:  # SQLAlchemy's first connection ends its own set-up with a ROLLBACK
            conn.execute(text("SELECT 1"))
        proxy.cut_next(Moment.ROLLBACK)
        fetched: Sequence[int] = []
        with pytest.raises(OperationalError), engine.connect() as conn:
            fetched = conn.execute(text("SELECT generate_series(1, 3)")).scalars().all()
        assert fetched == [1, 2, 3]
        with engine.connect() as conn:  # one cut only: the next connection works
            assert conn.execute(text("SELECT 1")).scalar() == 1
        engine.dispose()
        assert proxy.cuts[Moment.ROLLBACK] == 1
        assert proxy.statements["Q ROLLBACK"] >= 2, "psycopg ends a transaction with a simple-query ROLLBACK"


def test_a_cut_commit_never_reaches_the_server(postgres_url: str) -> None:
    direct = create_engine(postgres_url)
    with direct.begin() as conn:
        conn.execute(text("CREATE TABLE marks (n int)"))
    with _proxy(postgres_url, Cut(Moment.COMMIT, times=1)) as proxy:
        engine = create_engine(proxy.url_for(postgres_url))
        with pytest.raises(OperationalError), engine.begin() as conn:
            conn.execute(text("INSERT INTO marks VALUES (1)"))
        engine.dispose()
        assert proxy.cuts[Moment.COMMIT] == 1
    with direct.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM marks")).scalar() == 0
    direct.dispose()


def test_a_mid_result_cut_fails_only_results_longer_than_the_rows_it_lets_through(postgres_url: str) -> None:
    with _proxy(postgres_url, Cut(Moment.MID_RESULT, after_rows=2)) as proxy:
        engine = create_engine(proxy.url_for(postgres_url), pool_pre_ping=True)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT generate_series(1, 2)")).scalars().all() == [1, 2]
        with pytest.raises(OperationalError), engine.connect() as conn:
            conn.execute(text("SELECT generate_series(1, 10)")).scalars().all()
        engine.dispose()
        assert proxy.cuts[Moment.MID_RESULT] == 1


def test_a_listening_connection_is_cut_when_a_notification_is_due(postgres_url: str) -> None:
    def libpq(url: str) -> str:
        return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    with _proxy(postgres_url, Cut(Moment.LISTENING)) as proxy:
        listener = psycopg.connect(libpq(proxy.url_for(postgres_url)), autocommit=True)
        listener.execute("LISTEN proxy_test")
        with psycopg.connect(libpq(postgres_url), autocommit=True) as notifier:
            notifier.execute("NOTIFY proxy_test")
        with pytest.raises(psycopg.OperationalError):
            list(listener.notifies(timeout=5, stop_after=1))
        listener.close()
        assert proxy.cuts[Moment.LISTENING] == 1


def test_a_held_result_waits_for_release_and_only_a_result_naming_the_column_with_enough_rows_is_held(
    postgres_url: str,
) -> None:
    with _proxy(postgres_url) as proxy:
        engine = create_engine(proxy.url_for(postgres_url))
        proxy.hold_result("mark", min_rows=2)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1 AS mark")).scalar() == 1, "one row: not held"
            assert conn.execute(text("SELECT generate_series(1, 3) AS other")).scalars().all() == [1, 2, 3]
            assert not proxy.held.is_set()
            fetched: list[Sequence[int]] = []
            reader = threading.Thread(target=lambda: fetched.append(
                conn.execute(text("SELECT generate_series(1, 3) AS mark")).scalars().all()))
            reader.start()
            assert proxy.held.wait(10), "the result naming the column, with 3 rows, is held"
            reader.join(0.5)
            assert reader.is_alive() and not fetched, "the client waits for the held result"
            proxy.release()
            reader.join(10)
            assert fetched == [[1, 2, 3]], "released whole"
            assert conn.execute(text("SELECT generate_series(1, 3) AS mark")).scalars().all() == [1, 2, 3], \
                "a hold is taken once"
        engine.dispose()
