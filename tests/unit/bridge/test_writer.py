"""OutboxEvent validation and the INSERT parameters it produces; no database involved."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import create_engine, insert

from bridge.errors import DuplicateEventError, InvalidEventError
from bridge.schema import domain_events
from bridge.writer import RESERVED_HEADERS, OutboxEvent, append

pytestmark = pytest.mark.unit


def event(**overrides: Any) -> OutboxEvent:
    fields: dict[str, Any] = {
        "aggregate_type": "order",
        "aggregate_id": "42",
        "event_type": "OrderPlaced",
        "payload": {"total": 10},
    }
    fields.update(overrides)
    return OutboxEvent(**fields)


def test_payload_text_is_kept_byte_for_byte() -> None:
    text = '  { "b" : 1,\n\t"a" : [ 1.0, 1e300, "\\u00e9", "é" ] }  '
    assert event(payload=text).payload == text


def test_dict_and_list_payloads_are_serialized_compactly_keeping_key_order_and_unicode() -> None:
    assert event(payload={"b": 1, "a": "é 🚀"}).payload == '{"b":1,"a":"é 🚀"}'
    assert event(payload=[1, {"x": None}]).payload == '[1,{"x":null}]'


@pytest.mark.parametrize("payload", ["", "{", "{'a': 1}", "NaN", '{"a": Infinity}', "[1,]", "1e400", '"\\ud800"'])
def test_payload_that_is_not_json_text_is_refused(payload: str) -> None:
    with pytest.raises(InvalidEventError, match="payload is not valid JSON"):
        event(payload=payload)


@pytest.mark.parametrize("payload", [{"a": float("nan")}, {"a": object()}, {(1, 2): 3}])
def test_payload_that_cannot_be_serialized_is_refused(payload: Any) -> None:
    with pytest.raises(InvalidEventError, match="cannot be serialized"):
        event(payload=payload)


def test_payload_of_another_type_is_refused() -> None:
    with pytest.raises(InvalidEventError, match="not bytes"):
        event(payload=b"{}")


def test_payload_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(InvalidEventError, match="not valid Unicode"):
        event(payload={"a": "\ud800"})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (field, value)
        for field in ("aggregate_type", "aggregate_id", "event_type", "event_id")
        for value in ("", "   ", None, 7)
        if (field, value) != ("event_id", None)  # event_id=None means "generate one"
    ],
)
def test_ids_and_types_must_be_non_empty_strings(field: str, value: Any) -> None:
    with pytest.raises(InvalidEventError, match=f"{field} must be a non-empty string"):
        event(**{field: value})


@pytest.mark.parametrize(("field", "limit"), [("event_id", 100), ("aggregate_id", 255), ("event_type", 255)])
def test_values_longer_than_their_column_are_refused(field: str, limit: int) -> None:
    event(**{field: "x" * limit})
    with pytest.raises(InvalidEventError, match=f"the column holds {limit}"):
        event(**{field: "x" * (limit + 1)})


def test_event_id_defaults_to_a_fresh_uuid() -> None:
    first, second = event(), event()
    assert uuid.UUID(first.event_id)
    assert first.event_id != second.event_id


def test_header_values_must_be_strings_and_names_not_reserved() -> None:
    with pytest.raises(InvalidEventError, match="header 'n' must be a string, got int"):
        event(headers={"n": 1})
    with pytest.raises(InvalidEventError, match="header names must be non-empty strings"):
        event(headers={"": "x"})
    for name in RESERVED_HEADERS:
        with pytest.raises(InvalidEventError, match=f"header '{name}' is reserved"):
            event(headers={name: "x"})


def test_headers_are_frozen_and_stored_as_compact_json() -> None:
    source = {"trace": "abc", "tenant": "ü"}
    built = event(headers=source)
    source["trace"] = "changed"
    assert built.headers == {"trace": "abc", "tenant": "ü"}
    with pytest.raises(TypeError):
        built.headers["x"] = "y"  # type: ignore[index]
    assert built.row()["headers"] == '{"trace":"abc","tenant":"ü"}'
    assert event().row()["headers"] is None


def test_occurred_at_must_be_aware_and_is_kept_in_utc() -> None:
    with pytest.raises(InvalidEventError, match="timezone-aware"):
        event(occurred_at=datetime(2024, 1, 1))
    local = datetime(2024, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=2)))
    assert event(occurred_at=local).occurred_at == datetime(2024, 1, 1, 0, 0, tzinfo=UTC)
    assert event(occurred_at=local).occurred_at.tzinfo is UTC  # type: ignore[union-attr]


@pytest.mark.parametrize("version", [0, -1, True, "1"])
def test_schema_version_must_be_a_positive_int(version: Any) -> None:
    with pytest.raises(InvalidEventError, match="schema_version"):
        event(schema_version=version)


def test_events_are_immutable() -> None:
    built = event()
    with pytest.raises(AttributeError):
        built.payload = "{}"  # type: ignore[misc]


def test_row_names_every_insert_parameter() -> None:
    built = event(event_id="e-1", headers={"k": "v"}, schema_version=2)
    assert built.row() == {
        "event_id": "e-1",
        "aggregate_type": "order",
        "aggregate_id": "42",
        "event_type": "OrderPlaced",
        "payload": '{"total":10}',
        "headers": '{"k":"v"}',
        "schema_version": 2,
        "given_occurred_at": None,
    }


def test_append_refuses_an_event_id_repeated_within_the_batch_before_touching_the_database() -> None:
    with pytest.raises(DuplicateEventError, match="repeated within one append: dup"):
        append(object(), [event(event_id="dup"), event(event_id="ok"), event(event_id="dup")])  # type: ignore[arg-type]


def test_append_refuses_what_is_not_an_outbox_event() -> None:
    with pytest.raises(InvalidEventError, match="takes OutboxEvent objects, got dict"):
        append(object(), [{"event_id": "x"}])  # type: ignore[arg-type, list-item]


def test_append_needs_a_connection_or_session() -> None:
    with pytest.raises(TypeError, match="Connection or Session"):
        append(object(), [event()])  # type: ignore[arg-type]


class _RecordingDriver:
    """A stand-in for pyodbc that records every statement SQLAlchemy sends it: enough to see what the
    writer asks SQL Server to run, without a server or an ODBC driver."""

    paramstyle = "qmark"
    version = "5.1.0"
    DATETIME, STRING, NUMBER, BINARY, ROWID = 93, 1, 2, 3, 4
    SQL_WVARCHAR, SQL_VARCHAR, SQL_WCHAR = -9, 12, -8

    class Error(Exception):
        pass

    Warning = InterfaceError = DatabaseError = DataError = OperationalError = Error
    IntegrityError = InternalError = ProgrammingError = NotSupportedError = Error

    def __init__(self) -> None:
        self.sent: list[str] = []
        driver = self

        class Cursor:
            description = None
            rowcount = 1

            def execute(self, sql: str, params: Any = ()) -> None:
                driver.sent.append(sql)

            def executemany(self, sql: str, rows: Any) -> None:
                driver.sent.append(f"MANY {sql}")

            def fetchall(self) -> list[tuple[None]]:
                return [(None,)]  # what SELECT scope_identity() gives after an INSTEAD OF trigger

            def nextset(self) -> bool:
                return False

            def setinputsizes(self, sizes: Any) -> None:
                pass

            def close(self) -> None:
                pass

        class Connection:
            def cursor(self) -> Cursor:
                return Cursor()

            def commit(self) -> None:
                pass

            def rollback(self) -> None:
                pass

            def close(self) -> None:
                pass

            def add_output_converter(self, *args: Any) -> None:
                pass

        self.Cursor = Cursor
        self.connect = lambda *args, **kwargs: Connection()


def test_on_sql_server_each_event_is_its_own_insert_in_order_without_output_or_scope_identity() -> None:
    driver = _RecordingDriver()
    engine = create_engine("mssql+pyodbc://u:p@db/outbox?driver=x", module=driver, _initialize=False)
    events = [event(event_id=f"e-{n}") for n in range(3)]
    with engine.begin() as conn:
        append(conn, events)
    inserts = [sql for sql in driver.sent if "domain_events" in sql]
    # One statement per event keeps seq order = list order (the trigger numbers one statement's rows
    # by occurred_at, event_id). No OUTPUT (refused on a table with a trigger), no scope_identity()
    # (NULL after an INSTEAD OF trigger), and seq left to the trigger.
    assert len(inserts) == 3
    for sql in inserts:
        assert sql.startswith("INSERT INTO domain_events (event_id,")
        assert "OUTPUT" not in sql.upper() and "scope_identity" not in sql.lower()
        assert "seq" not in sql.split("VALUES")[0]
    assert not any(sql.startswith("MANY") or "IDENTITY_INSERT" in sql for sql in driver.sent)


def test_a_core_insert_into_domain_events_asks_sql_server_for_nothing_back() -> None:
    driver = _RecordingDriver()
    engine = create_engine("mssql+pyodbc://u:p@db/outbox?driver=x", module=driver, _initialize=False)
    with engine.begin() as conn:
        conn.execute(insert(domain_events), event(event_id="e-1").row() | {"occurred_at": datetime.now(UTC)})
    [sql] = [sql for sql in driver.sent if "domain_events" in sql]
    assert "OUTPUT" not in sql.upper() and "scope_identity" not in sql.lower()
