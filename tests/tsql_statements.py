"""Every statement the project sends to SQL Server, as SQL Server would receive it, grouped by where it comes
from: the offline migration scripts (`outbox-bridge migrate --sql`, up and down, one GO batch each), the
`outbox-bridge grants --sql` script (GO batches), the bridge's own queries and the integration tests' writers
(tests/dialects.py).

The bridge's queries are not copied here: its own code runs its SQL Server paths against a listening stand-in
for the driver (tests.listening_sqlserver), which records what they send. So a statement added to a code path
below is covered without touching this file; a new code path needs a line in `_PATHS`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import SecretStr
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from bridge import grants, migrate, names, replay, status, writer
from bridge.config import DatabaseSection, load_config, parse_duration
from bridge.core.holes import SeqRange
from bridge.doctor import BridgeDoctor
from bridge.store import dead_letters, deletable, instances, maintenance, mssql
from bridge.store.access import login, missing_privileges
from bridge.store.audit import audit
from bridge.store.instances import InstanceBoard
from bridge.store.invariants import never_skip_problems
from bridge.store.lease import Lease, RewindRequest, StartAt
from bridge.store.offsets import OffsetStore
from bridge.store.privileges import excess_rights
from bridge.store.revision import check_migrated
from tests import dialects
from tests.listening_sqlserver import ListeningServer, listening_sqlserver

#: Any URL: nothing connects, the listening driver answers.
URL = "mssql+pyodbc://listener/outbox?driver=ODBC+Driver+18+for+SQL+Server"
_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Emitted:
    """One unit of T-SQL as sent: a GO batch of a script, or one statement the bridge executes."""

    source: str
    sql: str
    #: A batch may hold several statements; a statement executed on its own is exactly one.
    batch: bool


def _batches(script: str) -> list[str]:
    """A sqlcmd script's batches: the text between lines that are only `GO`."""
    batches, current = [], []
    for line in script.splitlines():
        if line.strip().upper() == "GO":
            batches.append("\n".join(current))
            current = []
        else:
            current.append(line)
    batches.append("\n".join(current))
    return [batch for batch in batches if any(ln.strip() and not ln.strip().startswith("--")
                                              for ln in batch.splitlines())]


def migration_scripts() -> list[Emitted]:
    """`migrate --sql` for every revision: base to head, and head back to base."""
    up = migrate.sql("mssql", "base:head")
    down = migrate.sql("mssql", "base", downgrade=True)
    return [Emitted("migrations (upgrade)", batch, True) for batch in _batches(up)] + [
        Emitted("migrations (downgrade)", batch, True) for batch in _batches(down)]


def grant_scripts() -> list[Emitted]:
    """`grants --sql` with retention on (off only leaves its one GRANT DELETE out)."""
    return [Emitted("grants --sql", batch, True) for batch in _batches(grants.render(grants.RolePlan(
        "mssql", retention=True)))]


# ---------------------------------------------------------------------------------- the bridge's own paths

def _outbox_row(seq: int) -> dict[str, Any]:
    return {"seq": seq, "event_id": f"e{seq}", "aggregate_type": "order", "aggregate_id": "a-1",
            "event_type": "Placed", "payload": "{}", "headers": None, "occurred_at": _AT, "schema_version": 1}


_OFFSETS_ROW = {"bridge_name": "default", "watermark": 5, "epoch": 1, "owner": "other", "lease_expires_at": _AT,
                "heartbeat_at": _AT, "updated_at": _AT, "status_json": "{}", "retired_at": None,
                "retired_reason": None}


def _reader(server: ListeningServer, engine: Engine) -> None:
    server.answer(r"FROM domain_events WITH \(READCOMMITTEDLOCK, READPAST\)", [_outbox_row(1), _outbox_row(3)])
    reader = mssql.MssqlReader(engine)
    reader.poll(0, 100)
    reader.head_seq()
    reader.rows_in([SeqRange(2, 2), SeqRange(4, 6)])
    reader.oldest_after(3)
    server.answer(r"outbox_seq_tickets WITH \(NOLOCK\)", [(53,)], columns=["session_id"])
    server.answer(r"FROM sys\.dm_exec_sessions AS s", [(53, 7, _AT, "sleeping", "app", "host", "me")],
                  columns=["session_id", "transaction_id", "started_at", "state", "application_name", "client",
                           "login_name"])
    with engine.connect() as conn:
        mssql.horizon_holder(conn)


def _migrated(server: ListeningServer) -> None:
    """The outbox tables exist, at the newest revision, with the seq path intact."""
    server.answer(r"FROM \[INFORMATION_SCHEMA\]\.\[TABLES\]", [("domain_events",)])
    server.answer(r"FROM outbox_alembic_version", [(migrate.head(),)])
    server.answer(r"FROM sys\.triggers", [(0, 1)], columns=["is_disabled", "is_instead_of_trigger"])


def _start_up_checks(server: ListeningServer, engine: Engine) -> None:
    _migrated(server)
    server.answer(r"IS_SRVROLEMEMBER", [("me", 0, 0, "dbo", 0)],
                  columns=["login", "superuser", "db_owner", "owner", "owns"])
    with engine.connect() as conn:
        check_migrated(conn)
        never_skip_problems(conn)
        excess_rights(conn)
        missing_privileges(conn, retention=True)
        login(conn)


def _offsets(server: ListeningServer, engine: Engine) -> None:
    store = OffsetStore(engine, "default")
    store.ensure_row()  # no row yet: inserts it
    server.answer(r"FROM bridge_offsets\s+WHERE bridge_offsets.bridge_name", [_OFFSETS_ROW])
    lease = store.try_acquire("other", 10.0) or Lease("default", "other", 2, 5)
    letter = dead_letters.DeadLetter(4, "e4", "order", "a-1", "too large", "outbox.dlq", 10, False)
    server.answer(r"^UPDATE bridge_dead_letters", rowcount=0, times=1)  # a new dead letter: inserted
    store.persist(lease, 7, 10.0, {"in_flight": 0}, dead_letters=[letter])
    store.persist_rewound(lease, 3, 10.0, {})
    store.history(5)
    store.start_at(lease, StartAt(2, "me@host", "a reason", 2), 10.0)
    store.open_dead_letters()
    server.answer(r"FROM bridge_replay_audit", [{"id": 9, "from_seq": 3, "requested_by": "me", "reason": "why"}])
    request = store.pending_rewind() or RewindRequest(9, 3, "me", "why")
    store.apply_rewind(lease, request, 10.0)
    store.refuse_rewind(request, "below the oldest row")
    store.release(lease)
    store.set_watermark(4)
    board = InstanceBoard(engine, "default", "host:1:abc")
    server.answer(r"^UPDATE bridge_instances", rowcount=0, times=1)  # a new instance: inserted
    board.report(instances.STARTING, step="seq path", attempts=2, since=_AT, error="server closed the connection")
    board.report(instances.LEADING)
    board.remove()


def _dead_letters_and_retention(server: ListeningServer, engine: Engine) -> None:
    with engine.begin() as conn:
        dead_letters.listed(conn, "default", statuses=dead_letters.DEAD_LETTER_STATUSES, from_seq=1, to_seq=9)
        dead_letters.close(conn, "default", [4, 5], dead_letters.RESOLVED, "me", "fixed", _AT)
        deletable.hold_offsets(conn)
        deletable.deletable(conn, "default")
        run = deletable.record_deletion(conn, None, "me", [4, 5], _AT)
        deletable.record_deletion(conn, run, "me", [6], _AT)
        deletable.deleted_through(conn)
    server.answer(r"^SELECT count\(\*\) AS count_1\s+FROM", [(2,)])
    server.answer(r"^SELECT TOP \d+ domain_events\.seq\s", [(4,), (5,)], times=1)
    server.answer(r"^SELECT bridge_offsets\.bridge_name, bridge_offsets\.watermark\s",
                  [("default", 9), ("slow", 5)])
    maintenance.cleanup(DatabaseSection(SecretStr(URL), "default"), timedelta(days=7), dry_run=False,
                        show_progress=False)


def _writer(server: ListeningServer, engine: Engine) -> None:
    with engine.begin() as conn:
        writer.append(conn, [writer.OutboxEvent(aggregate_type="order", aggregate_id="a-1", event_type="Placed",
                                                payload={"n": 1}, headers={"traceparent": "00-ab-cd-01"}),
                             writer.OutboxEvent(aggregate_type="order", aggregate_id="a-1", event_type="Paid",
                                                payload="{}", occurred_at=_AT)])
        audit(conn, "default", "range", 1, 9, status="done", reason="a reason", filters={"aggregate_type": "order"})


def _operator_commands(server: ListeningServer, engine: Engine) -> None:
    # Kafka refuses at once (port 1): only the database's side of the commands runs.
    config = load_config(env={"OUTBOX_DB_URL": URL, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
                              "BRIDGE_RETENTION": "7d"})
    _migrated(server)
    server.answer(r"FROM bridge_offsets\s+WHERE bridge_offsets.bridge_name", [_OFFSETS_ROW | {"owner": None}])
    status.collect_status(config.database)
    names.list_names(config.database, parse_duration(config.retention_hold_alert_after))
    names.retire(config.database, "default", "moved to another outbox")
    server.answer(r"^SELECT min\(domain_events\.seq\) AS min_1\s+FROM", [(2,)])
    server.answer(r"^SELECT max\(domain_events\.seq\) AS max_1\s+FROM domain_events\s+WHERE", [(4,)])
    in_range = replay.ReplayRequest(from_seq=None, to_seq=None, aggregate_type="order", event_type="Placed",
                                    mode="range", topic=None, reason="a reason", dry_run=True, seqs=(2, 3),
                                    from_time=_AT - timedelta(days=1), to_time=_AT, aggregate_ids=("a-1", "a-2"))
    replay.plan_replay(config, in_range)
    replay.rewind(config, replace(in_range, mode="rewind", aggregate_type=None, event_type=None, seqs=(),
                                  to_time=None, aggregate_ids=()))
    BridgeDoctor(config, timeout_s=10.0, kafka_timeout_s=0.2).run()


def _test_writers(server: ListeningServer, engine: Engine) -> None:
    sql = dialects.MssqlWriterSql()
    server.answer(r"^SELECT seq FROM domain_events WHERE event_id", [(7,)])
    server.answer(r"^SELECT version FROM aggregate_locks", [(1,)])
    server.answer(r"is_read_committed_snapshot_on", [(1,)])
    dialects.turn_on_read_committed_snapshot(URL)
    rows = [dialects.EventRow(f"e{k}", "a-1", "{}") for k in range(3)]
    with engine.begin() as conn:
        sql.insert(conn, "e9", "order", "a-1", "{}")
        sql.lock_aggregate(conn, "a-1")
        sql.savepoint(conn, "before_second")
        sql.rollback_to(conn, "before_second")
        conn.execute(sql.multi_row_insert(len(rows)), sql.params(rows))


_PATHS: list[tuple[str, Callable[[ListeningServer, Engine], None]]] = [
    ("reader and horizon", _reader),
    ("start-up checks", _start_up_checks),
    ("watermark and lease", _offsets),
    ("dead letters and retention", _dead_letters_and_retention),
    ("writer", _writer),
    ("operator commands", _operator_commands),
    ("tests/dialects.py", _test_writers),
]


def executed_statements() -> list[Emitted]:
    """What the bridge's SQL Server code paths and the test writers send, each distinct statement once."""
    emitted: dict[str, Emitted] = {}
    for source, path in _PATHS:
        with listening_sqlserver() as server:
            engine = create_engine(URL)
            try:
                with server.sending(source):
                    path(server, engine)
            finally:
                engine.dispose()
        for sent in server.sent:
            emitted.setdefault(sent.sql, Emitted(sent.origin, sent.sql, False))
    return list(emitted.values())


@functools.cache
def every_statement() -> tuple[Emitted, ...]:
    """Everything the project sends to SQL Server."""
    return (*migration_scripts(), *grant_scripts(), *executed_statements())
