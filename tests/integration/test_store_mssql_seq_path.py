"""SQL Server's seq path (revision 0002) against a live server: the contract's plain INSERT, multi-row
`INSERT ... SELECT`, and stamp before seq (a writer that drew its seq holds `MIN_ACTIVE_ROWVERSION()` at
or below its ticket until it ends). Skipped unless TEST_SQLSERVER_URL is set or a Docker engine answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, Engine, create_engine, insert, text
from sqlalchemy.exc import DBAPIError

from bridge import migrate
from bridge.errors import DuplicateEventError
from bridge.schema import MSSQL_SEQ_TRIGGER, MSSQL_TICKETS, domain_events
from bridge.writer import OutboxEvent, append

pytestmark = [pytest.mark.integration, pytest.mark.sqlserver]

PLAIN_INSERT = text(
    "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
    "VALUES (:event_id, 'order', 'a-1', 'OrderPlaced', '{}')"
)
LOW = text("SELECT CAST(MIN_ACTIVE_ROWVERSION() AS BIGINT)")
HIGH = text("SELECT CAST(@@DBTS AS BIGINT) + 1")
MY_TICKETS = text(f"SELECT CAST(stamped AS BIGINT) FROM {MSSQL_TICKETS} WHERE session_id = @@SPID ORDER BY stamped")


@pytest.fixture()
def engine(sqlserver_url: str) -> Iterator[Engine]:
    migrate.upgrade(sqlserver_url)
    engine = create_engine(sqlserver_url)
    yield engine
    engine.dispose()


def seqs(conn: Connection, where: str = "1 = 1") -> list[tuple[int, str]]:
    rows = conn.execute(text(f"SELECT seq, event_id FROM domain_events WHERE {where} ORDER BY seq"))
    return [(int(seq), str(event_id)) for seq, event_id in rows]


def test_a_plain_insert_naming_only_the_contract_columns_gets_its_seq_from_the_trigger(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(PLAIN_INSERT, {"event_id": "e-1"})
    with engine.connect() as conn:
        row = conn.execute(text("SELECT seq, occurred_at, schema_version FROM domain_events")).one()
        assert row.seq >= 1 and row.occurred_at is not None and row.schema_version == 1
        trigger = conn.execute(text("SELECT is_instead_of_trigger, is_disabled FROM sys.triggers WHERE name = :n"),
                               {"n": MSSQL_SEQ_TRIGGER}).one()
        assert tuple(trigger) == (True, False)


def test_a_multi_row_insert_select_numbers_its_rows_after_one_ticket_in_occurred_at_order(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload, occurred_at) "
            "SELECT CONCAT('m-', n), 'order', 'a-1', 'T', '{}', DATEADD(SECOND, n, '2026-01-01T00:00:00Z') "
            "FROM (SELECT TOP (200) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS n FROM sys.all_objects) AS numbers"
        ))
        tickets = conn.execute(MY_TICKETS).scalars().all()
    assert len(tickets) == 1  # one ticket for the whole statement, kept until the transaction ended
    with engine.connect() as conn:
        rows = seqs(conn)
    assert [event_id for _, event_id in rows] == [f"m-{n}" for n in range(1, 201)]
    assert [seq for seq, _ in rows] == sorted(seq for seq, _ in rows)


def test_a_writer_that_drew_its_seq_holds_the_horizon_at_or_below_its_ticket_until_it_commits(
    engine: Engine,
) -> None:
    with engine.connect() as writer, engine.connect() as other:
        writer.execute(PLAIN_INSERT, {"event_id": "slow"})  # opens the writer's transaction
        [ticket] = writer.execute(MY_TICKETS).scalars().all()
        # Another writer commits a later seq meanwhile: the bridge would see a hole at "slow".
        other.execute(PLAIN_INSERT, {"event_id": "fast"})
        other.commit()
        # Read through the writer: the other session would wait on the writer's row lock.
        [(slow, _), (fast, _)] = seqs(writer, "event_id IN ('slow', 'fast')")
        assert slow < fast
        mark = other.execute(HIGH).scalar_one()  # what the bridge marks the hole with
        assert ticket < mark
        # A second statement in the same transaction takes a new ticket; the first still holds.
        writer.execute(PLAIN_INSERT, {"event_id": "slow-2"})
        assert other.execute(LOW).scalar_one() <= ticket
        other.commit()
        writer.commit()
        assert other.execute(LOW).scalar_one() > ticket
        other.commit()


def test_tickets_of_ended_transactions_are_forgotten(engine: Engine) -> None:
    with engine.connect() as conn:
        for n in range(20):
            conn.execute(PLAIN_INSERT, {"event_id": f"t-{n}"})
            conn.commit()
        # Each statement forgets the session's earlier, committed tickets; only the last remains.
        assert len(conn.execute(MY_TICKETS).scalars().all()) == 1


def test_the_writer_keeps_list_order_and_reports_duplicates(engine: Engine) -> None:
    events = [OutboxEvent(event_id=f"w-{n}", aggregate_type="order", aggregate_id="a-1", event_type="T",
                          payload={"n": n}) for n in range(10)]
    with engine.begin() as conn:
        append(conn, events)
        conn.execute(insert(domain_events), {"event_id": "core-1", "aggregate_type": "order", "aggregate_id": "a-1",
                                             "event_type": "T", "payload": "{}"})
    with engine.connect() as conn:
        assert [event_id for _, event_id in seqs(conn)] == [f"w-{n}" for n in range(10)] + ["core-1"]
    with pytest.raises(DuplicateEventError, match="w-3"), engine.begin() as conn:
        append(conn, [events[3]])


def test_an_insert_that_bypasses_the_trigger_is_refused(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"DISABLE TRIGGER {MSSQL_SEQ_TRIGGER} ON domain_events"))
    try:
        with pytest.raises(DBAPIError, match="ck_domain_events_seq_drawn"), engine.begin() as conn:
            conn.execute(PLAIN_INSERT, {"event_id": "bypass"})
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"ENABLE TRIGGER {MSSQL_SEQ_TRIGGER} ON domain_events"))


def test_upgrading_from_0001_keeps_rows_and_grants_and_never_reuses_a_seq(sqlserver_url: str) -> None:
    role = f"outbox_writer_{uuid.uuid4().hex[:8]}"
    migrate.upgrade(sqlserver_url, "0001")
    engine = create_engine(sqlserver_url)
    try:
        with engine.begin() as conn:
            for n in range(3):
                conn.execute(PLAIN_INSERT, {"event_id": f"old-{n}"})
            conn.execute(text(f"CREATE ROLE [{role}]"))
            conn.execute(text(f"GRANT INSERT ON domain_events TO [{role}]"))
        with engine.connect() as conn:
            conn.execute(PLAIN_INSERT, {"event_id": "rolled-back"})  # draws an IDENTITY value
            conn.rollback()
            before = seqs(conn)
            drawn = int(conn.execute(text("SELECT CAST(IDENT_CURRENT('domain_events') AS BIGINT)")).scalar_one())
        migrate.upgrade(sqlserver_url)
        with engine.begin() as conn:
            conn.execute(PLAIN_INSERT, {"event_id": "new"})
        with engine.connect() as conn:
            after = seqs(conn)
            granted = conn.execute(text(
                "SELECT p.permission_name FROM sys.database_permissions AS p "
                "WHERE p.major_id = OBJECT_ID(N'domain_events') AND USER_NAME(p.grantee_principal_id) = :role"
            ), {"role": role}).scalars().all()
        assert after[:-1] == before
        assert after[-1][1] == "new" and after[-1][0] > drawn
        assert granted == ["INSERT"]
    finally:
        engine.dispose()


def test_downgrading_to_0001_continues_the_identity_above_every_drawn_seq(engine: Engine, sqlserver_url: str) -> None:
    with engine.begin() as conn:
        for n in range(3):
            conn.execute(PLAIN_INSERT, {"event_id": f"seq-{n}"})
    with engine.connect() as conn:
        highest = seqs(conn)[-1][0]
    migrate.downgrade(sqlserver_url, "0001")
    with engine.begin() as conn:
        conn.execute(PLAIN_INSERT, {"event_id": "identity-again"})
    with engine.connect() as conn:
        rows = seqs(conn)
        assert conn.execute(text("SELECT COUNT(*) FROM sys.triggers WHERE name = :n"),
                            {"n": MSSQL_SEQ_TRIGGER}).scalar_one() == 0
    assert rows[-1][1] == "identity-again" and rows[-1][0] > highest
    assert len(rows) == 4
