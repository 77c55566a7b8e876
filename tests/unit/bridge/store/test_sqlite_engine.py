"""A SQLite outbox is in WAL mode from its migration on, so a connection that opens while a writer holds
its transaction reads at once instead of racing it to switch the journal mode.

Switching to WAL needs an exclusive lock. When the bridge's connections switched it on connect, a reader
opening beside a busy writer failed with "database is locked" (SQLite does not wait when waiting could
deadlock), which a clean-clone CI run met in `test_daemon_unreadable_rows`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from bridge.migrate import upgrade
from bridge.store.engine import make_engine

pytestmark = pytest.mark.unit


def test_the_migration_leaves_a_sqlite_outbox_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "outbox.db"
    upgrade(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_connection_opens_and_reads_while_a_writer_holds_its_transaction(tmp_path: Path) -> None:
    path = tmp_path / "outbox.db"
    upgrade(f"sqlite:///{path}")
    writer = sqlite3.connect(path, isolation_level=None, timeout=0)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                   "VALUES ('e-1', 'order', 'a-1', 'Placed', '{}')")
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM domain_events")).scalar_one() == 0
    finally:
        engine.dispose()
        writer.execute("ROLLBACK")
        writer.close()


def test_an_outbox_made_before_wal_is_switched_on_first_connect(tmp_path: Path) -> None:
    path = tmp_path / "outbox.db"
    upgrade(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
    finally:
        engine.dispose()
