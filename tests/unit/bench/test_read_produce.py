"""The bare read-and-produce loop (`bench.read_produce`) reads with the bridge's own read of the database it is
given: B2 sets the bridge on SQLite beside it, as B1 does on PostgreSQL."""

from __future__ import annotations

import pytest

from bench.read_produce import _reader
from bench.workload import Workload, load_sqlite
from bridge.migrate import upgrade
from bridge.store.engine import make_engine
from bridge.store.rows import select_after_sqlite


def test_on_sqlite_the_loop_reads_with_the_bridges_sqlite_read(sqlite_url: str) -> None:
    upgrade(sqlite_url)
    load_sqlite(sqlite_url.removeprefix("sqlite:///"), Workload(keys=3), 5)
    engine = make_engine(sqlite_url)
    read = _reader(engine.dialect.name)
    assert read is select_after_sqlite
    with engine.connect() as conn:
        rows = read(conn, 2, 10)
    engine.dispose()
    assert [row.seq for row in rows] == [3, 4, 5]
    assert all(row.unreadable is None for row in rows)


def test_a_database_it_cannot_read_is_named() -> None:
    with pytest.raises(ValueError, match="PostgreSQL or SQLite, not mssql"):
        _reader("mssql")
