"""PostgreSQL timeouts as the real driver reports them: a statement timeout stops the bridge with the
setting to change (run again, it would time out again), a lock timeout is retried (the lock's holder ends)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from bridge import migrate
from bridge.errors import StoreError, TransientStoreError
from bridge.store.postgres import PostgresReader

pytestmark = pytest.mark.integration


@pytest.fixture()
def locked(postgres_url: str) -> Iterator[str]:
    """A migrated outbox whose table another transaction holds under an exclusive lock (DDL, VACUUM FULL)."""
    migrate.upgrade(postgres_url)
    holder = create_engine(postgres_url)
    with holder.connect() as conn:
        conn.execute(text("LOCK TABLE domain_events IN ACCESS EXCLUSIVE MODE"))
        yield postgres_url
        conn.rollback()
    holder.dispose()


def _reader(url: str, options: str) -> PostgresReader:
    engine: Engine = create_engine(url, connect_args={"options": options})
    return PostgresReader(engine)


def test_a_read_that_runs_past_statement_timeout_is_not_retried_and_names_the_setting(locked: str) -> None:
    reader = _reader(locked, "-c statement_timeout=200 -c lock_timeout=0")
    try:
        with pytest.raises(StoreError) as raised:
            reader.poll(0, 100)
    finally:
        reader.close()
    assert not isinstance(raised.value, TransientStoreError)
    assert "statement timeout" in str(raised.value)
    assert "statement_timeout" in str(raised.value) and "BRIDGE_READ_BATCH_SIZE" in str(raised.value)


def test_a_read_that_waits_past_lock_timeout_is_retried(locked: str) -> None:
    reader = _reader(locked, "-c statement_timeout=0 -c lock_timeout=200")
    try:
        with pytest.raises(TransientStoreError, match="lock timeout"):
            reader.poll(0, 100)
    finally:
        reader.close()
