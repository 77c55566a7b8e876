"""The outbox store contract, run against every backend: SQLite, PostgreSQL, and SQL Server when reachable.

The `store_url` fixture (tests/conftest.py) gives a fresh, empty database per test and backend.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, delete, insert, inspect, select, text
from sqlalchemy.exc import IntegrityError, SAWarning
from sqlalchemy.orm import Session

from bridge import migrate
from bridge.errors import DuplicateEventError
from bridge.schema import bridge_offsets, bridge_replay_audit, domain_events, metadata
from bridge.store import OutboxRow, select_after
from bridge.writer import OutboxEvent, append, append_one

pytestmark = pytest.mark.integration

OUTBOX_TABLES = {"domain_events", "bridge_offsets", "bridge_replay_audit"}

# JSON texts a byte-for-byte store must give back unchanged: odd whitespace, key order, escapes next
# to the characters they stand for, non-BMP and combining characters, numbers a parser would rewrite
# (all within the one JSON verdict, bridge.core.json_text: 1e400 is refused by the writer and the bridge alike).
PAYLOADS = [
    '{"b":1,"a":2}',
    '  {\n\t"z" : [ 1 , 2.50 , 1E+2 , -0 ] ,\r\n "a" : null }  ',
    '{"name":"Zoë","also":"Zo\\u00eb","emoji":"🚀 \\ud83d\\ude80","cjk":"漢字","rtl":"שלום"}',
    '{"combining":"e\u0301","nbsp":"a\u00a0b","quote":"\\"","slash":"\\/"}',
    '[{"big":123456789012345678901234567890},true,false,null,"\\n"]',
    '"just a string"',
    "42",
]

PLAIN_INSERT = text(
    "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
    "VALUES (:event_id, :aggregate_type, :aggregate_id, :event_type, :payload)"
)


@pytest.fixture()
def engine(store_url: str) -> Iterator[Engine]:
    migrate.upgrade(store_url)
    engine = create_engine(store_url)
    yield engine
    engine.dispose()


def plain_insert(engine: Engine, event_id: str, payload: str, aggregate_id: str = "a-1") -> None:
    with engine.begin() as conn:
        conn.execute(
            PLAIN_INSERT,
            {
                "event_id": event_id,
                "aggregate_type": "order",
                "aggregate_id": aggregate_id,
                "event_type": "OrderPlaced",
                "payload": payload,
            },
        )


def all_rows(engine: Engine) -> list[OutboxRow]:
    with engine.connect() as conn:
        return select_after(conn, 0, 10_000)


def event(event_id: str, payload: object = "{}", **fields: object) -> OutboxEvent:
    return OutboxEvent(
        event_id=event_id,
        aggregate_type="order",
        aggregate_id=str(fields.pop("aggregate_id", "a-1")),
        event_type="OrderPlaced",
        payload=payload,  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )


def test_migrations_go_up_and_down_and_up_again(store_url: str) -> None:
    assert migrate.current(store_url) is None
    migrate.upgrade(store_url)
    assert migrate.current(store_url) == migrate.head()
    probe = create_engine(store_url)
    try:
        assert set(inspect(probe).get_table_names()) >= OUTBOX_TABLES
        migrate.downgrade(store_url, "base")
        assert migrate.current(store_url) is None
        assert not OUTBOX_TABLES & set(inspect(probe).get_table_names())
        migrate.upgrade(store_url)
        migrate.upgrade(store_url)  # already at head: nothing to do
        assert migrate.current(store_url) == migrate.head()
    finally:
        probe.dispose()


def test_the_migrated_database_matches_the_schema_metadata(engine: Engine) -> None:
    with engine.connect() as conn, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # "Did not recognize type 'xid8'" while reflecting
        context = MigrationContext.configure(
            conn,
            opts={
                "version_table": migrate.VERSION_TABLE,
                "include_object": migrate.include_object,
                "compare_type": True,
            },
        )
        assert compare_metadata(context, metadata) == []


def test_a_plain_insert_naming_only_the_five_contract_columns_works(engine: Engine) -> None:
    before = datetime.now(UTC) - timedelta(minutes=5)
    plain_insert(engine, "e-1", '{"a":1}')
    [row] = all_rows(engine)
    assert row.seq >= 1
    assert (row.event_id, row.aggregate_type, row.aggregate_id, row.event_type) == (
        "e-1",
        "order",
        "a-1",
        "OrderPlaced",
    )
    assert row.payload == '{"a":1}'
    assert row.headers is None
    assert row.schema_version == 1
    assert row.occurred_at.tzinfo is not None
    assert before < row.occurred_at < datetime.now(UTC) + timedelta(minutes=5)


def test_payloads_come_back_byte_for_byte_in_seq_order_from_sql_and_the_writer(engine: Engine) -> None:
    expected: list[tuple[str, str]] = []
    for index, payload in enumerate(PAYLOADS):
        plain_insert(engine, f"sql-{index}", payload)
        expected.append((f"sql-{index}", payload))
    writer_events = [event(f"api-{index}", payload) for index, payload in enumerate(PAYLOADS)]
    writer_events.append(event("api-dict", {"zeta": 1, "alpha": "ü", "nested": {"b": [1, 2]}}))
    with engine.begin() as conn:
        append(conn, writer_events)
    expected += [(e.event_id, e.payload) for e in writer_events]

    rows = all_rows(engine)
    assert [(row.event_id, row.payload) for row in rows] == expected
    assert [row.payload.encode() for row in rows] == [payload.encode() for _, payload in expected]
    assert rows[-1].payload == '{"zeta":1,"alpha":"ü","nested":{"b":[1,2]}}'
    seqs = [row.seq for row in rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_the_writer_keeps_headers_timestamps_and_schema_version(engine: Engine) -> None:
    given = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=-3)))
    with engine.begin() as conn:
        append(
            conn,
            [
                event("with-all", headers={"trace": "t-1", "tenant": "ü"}, occurred_at=given, schema_version=3),
                event("defaults"),
            ],
        )
    with_all, defaults = all_rows(engine)
    assert with_all.headers == '{"trace":"t-1","tenant":"ü"}'
    assert with_all.occurred_at == given
    assert with_all.occurred_at.utcoffset() == timedelta(0)
    assert with_all.schema_version == 3
    assert defaults.headers is None
    assert abs(defaults.occurred_at - datetime.now(UTC)) < timedelta(minutes=5)


def test_seqs_increase_and_are_never_reused_after_the_newest_row_is_deleted(engine: Engine) -> None:
    for event_id in ("a", "b", "c"):
        plain_insert(engine, event_id, "{}")
    newest = all_rows(engine)[-1].seq
    with engine.begin() as conn:
        conn.execute(delete(domain_events).where(domain_events.c.seq == newest))
    plain_insert(engine, "d", "{}")
    assert all_rows(engine)[-1].seq > newest


def test_a_duplicate_event_id_is_rejected_with_duplicate_event_error(engine: Engine) -> None:
    with engine.begin() as conn:
        append_one(conn, event("order-42-placed"))
    with pytest.raises(DuplicateEventError, match="order-42-placed"), engine.begin() as conn:
        append(conn, [event("order-42-placed")])
    with pytest.raises(DuplicateEventError, match="order-42-placed"), engine.begin() as conn:
        append(conn, [event("fresh-1"), event("order-42-placed"), event("fresh-2")])
    with pytest.raises(IntegrityError):  # the database itself enforces it for writers in other languages
        plain_insert(engine, "order-42-placed", "{}")
    assert [row.event_id for row in all_rows(engine)] == ["order-42-placed"]


def test_append_leaves_committing_to_the_caller(engine: Engine) -> None:
    with engine.connect() as conn:
        append(conn, [event("rolled-back")])
        conn.rollback()
        append(conn, [event("committed")])
        conn.commit()
    assert [row.event_id for row in all_rows(engine)] == ["committed"]


def test_append_works_through_an_orm_session(engine: Engine) -> None:
    with Session(engine) as session:
        append(session, [event("s-1"), event("s-2")])
        session.rollback()
        append_one(session, event("s-3"))
        session.commit()
    assert [row.event_id for row in all_rows(engine)] == ["s-3"]


def test_the_bridge_tables_take_rows_and_fill_their_defaults(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(insert(bridge_offsets).values(bridge_name="default"))
        conn.execute(
            insert(bridge_replay_audit).values(
                bridge_name="default", mode="rewind", from_seq=10, requested_by="ops@example"
            )
        )
        offsets = conn.execute(select(bridge_offsets)).mappings().one()
        audit = conn.execute(select(bridge_replay_audit)).mappings().one()
    assert (offsets["watermark"], offsets["epoch"], offsets["owner"]) == (0, 0, None)
    assert offsets["updated_at"].tzinfo is not None
    assert audit["id"] >= 1 and audit["status"] == "pending" and audit["to_seq"] is None
    assert abs(audit["requested_at"] - datetime.now(UTC)) < timedelta(minutes=5)
