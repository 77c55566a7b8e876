"""The PostgreSQL read gives its rows in seq order without asking the server to sort them again."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bridge.store.postgres import visible as postgres

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _Conn:
    """Answers the read as the server does: horizon columns, then the row's columns. It stands for SQLAlchemy's
    connection, whose psycopg connection and cursor the read uses (`conn.connection.driver_connection`)."""

    def __init__(self, seqs: list[int | None]) -> None:
        self.rows = [(5, 9, *(None,) * 9) if seq is None else
                     (5, 9, seq, f"e{seq}", "order", "a", "Happened", "{}", None, NOW, 1) for seq in seqs]
        self.connection = self.driver_connection = self

    def cursor(self) -> _Conn:
        return self

    def execute(self, statement: Any, params: Any = None) -> None:
        pass

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


def test_the_statement_does_not_sort_the_joined_rows_a_second_time() -> None:
    sql = str(postgres._VISIBLE)
    assert sql.count("ORDER BY") == 1, "only the lateral read orders (and limits) the rows"


def test_rows_come_back_in_seq_order_whatever_order_the_server_sent() -> None:
    low, high, rows = postgres.PostgresSession(_Conn([7, 5, 6, 9])).snapshot_rows(4, 10)  # type: ignore[arg-type]
    assert (low, high) == (5, 9)
    assert [row.seq for row in rows] == [5, 6, 7, 9]


def test_rows_in_order_and_no_rows_at_all_are_taken_as_they_come() -> None:
    assert [r.seq for r in postgres.PostgresSession(_Conn([5, 6, 8])).snapshot_rows(4, 10)[2]] == [5, 6, 8]  # type: ignore[arg-type]
    assert postgres.PostgresSession(_Conn([None])).snapshot_rows(4, 10) == (5, 9, ())  # type: ignore[arg-type]
