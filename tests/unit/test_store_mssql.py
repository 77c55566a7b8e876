"""The SQL Server reader: its SQL compiles for mssql and names the rowversion horizon, and it takes
`low` before and `high` after the row read, which is what makes settling a hole safe."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.dialects import mssql

from bridge.store import mssql as reader
from bridge.store.holes import HoleTracker
from bridge.store.rows import rows_after


def _sql(statement: Any) -> str:
    return str(statement.compile(dialect=mssql.dialect(), compile_kwargs={"literal_binds": True}))


def test_queries_compile_for_sql_server() -> None:
    assert "MIN_ACTIVE_ROWVERSION()" in _sql(reader.LOW)
    assert "@@DBTS" in _sql(reader.HIGH)
    rows = _sql(rows_after(41, 500))
    assert "TOP 500" in rows and "seq > 41" in rows and "ORDER BY domain_events.seq" in rows
    assert "sys.dm_tran_active_transactions" in str(reader._HOLDER)


class _Result:
    def __init__(self, value: Any) -> None:
        self.value = value

    def scalar_one(self) -> Any:
        return self.value

    def mappings(self) -> list[dict[str, Any]]:
        return self.value


class _Server:
    """Answers the three statements of a read in order and records that order."""

    def __init__(self, reads: list[tuple[int, list[int], int]]) -> None:
        self.reads = reads
        self.log: list[str] = []

    def execute(self, statement: Any) -> _Result:
        sql = _sql(statement)
        low, seqs, high = self.reads[0]
        if "MIN_ACTIVE_ROWVERSION" in sql:
            self.log.append("low")
            return _Result(low)
        if "@@DBTS" in sql:
            self.log.append("high")
            self.reads.pop(0)
            return _Result(high)
        self.log.append("rows")
        now = datetime.now(UTC)
        return _Result([{"seq": s, "event_id": f"e{s}", "aggregate_type": "order", "aggregate_id": "a",
                         "event_type": "T", "payload": "{}", "headers": None, "occurred_at": now,
                         "schema_version": 1} for s in seqs])


def test_low_before_rows_before_high_and_holes_wait_for_the_writers() -> None:
    tracker = HoleTracker(0)
    server = _Server([
        (100, [1, 2, 4], 105),   # seq 3 missing while a writer stamped below 105 may be open
        (103, [1, 2, 4, 5], 108),  # still open (low 103 < mark 105): keep waiting
        (106, [1, 2, 3, 4, 5], 110),  # the writer committed: 3 is delivered, not settled
    ])
    first = reader.poll(server, tracker, 100)  # type: ignore[arg-type]
    assert server.log == ["low", "rows", "high"]
    assert [r.seq for r in first.rows] == [1, 2] and first.waiting_on is not None
    second = reader.poll(server, tracker, 100)  # type: ignore[arg-type]
    assert second.rows == () and second.waiting_on is not None
    third = reader.poll(server, tracker, 100)  # type: ignore[arg-type]
    assert [r.seq for r in third.rows] == [3, 4, 5] and third.settled == ()


def test_a_rolled_back_seq_settles_once_every_older_writer_has_ended() -> None:
    tracker = HoleTracker(0)
    server = _Server([(50, [1, 3], 60), (60, [1, 3], 61)])
    assert [r.seq for r in reader.poll(server, tracker, 10).rows] == [1]  # type: ignore[arg-type]
    step = reader.poll(server, tracker, 10)  # type: ignore[arg-type]
    assert [r.seq for r in step.rows] == [3]
    assert [(h.first, h.last) for h in step.settled] == [(2, 2)]
