"""What never-skip depends on in the database, checked before a bridge publishes anything.

The hole rule is only as good as the order in which writers take their horizon stamp and their seq.
A DBA who "tidies" the outbox (a sequence cache for speed, a plain `nextval` default, a disabled
trigger) breaks that order without any error, and events are then lost silently. So the bridge
looks before it leads, and refuses to run, naming what changed and how to put it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlalchemy import text
from sqlalchemy.engine import Connection

from bridge.errors import ConfigurationError
from bridge.schema import (
    MSSQL_SEQ_SEQUENCE,
    MSSQL_SEQ_TRIGGER,
    MSSQL_TICKETS,
    SEQ_FUNCTION,
    SEQ_SEQUENCE,
)

_REPAIR: Final = "re-run the outbox migrations (`outbox-bridge migrate`) or undo the change by hand"


class OutboxDamagedError(ConfigurationError):
    """The outbox no longer guarantees stamp-before-seq: publishing could skip events silently."""


@dataclass(frozen=True, slots=True)
class SeqPathProblem:
    """One broken invariant of the seq path: what changed and, where one statement puts it back, the repair."""

    summary: str
    repair: str | None = None

    def __str__(self) -> str:
        return self.summary if self.repair is None else f"{self.summary}. Repair: {self.repair}"


_POSTGRES: Final = text(
    "SELECT (SELECT cache_size FROM pg_sequences WHERE sequencename = :sequence AND schemaname = current_schema())"
    " AS cache_size, (SELECT column_default FROM information_schema.columns WHERE table_schema = current_schema()"
    " AND table_name = 'domain_events' AND column_name = 'seq') AS seq_default"
)


def _postgres(conn: Connection) -> list[SeqPathProblem]:
    problems: list[SeqPathProblem] = []
    # One round trip for both: the start-up check gets through a failing link more easily.
    cache, default = conn.execute(_POSTGRES, {"sequence": SEQ_SEQUENCE}).one()
    if cache is None:
        problems.append(SeqPathProblem(f"the sequence {SEQ_SEQUENCE} is missing"))
    elif int(cache) != 1:
        problems.append(SeqPathProblem(
            f"the sequence {SEQ_SEQUENCE} has CACHE {cache}: each session then holds a block of seqs, and a "
            "low seq can commit after the horizon passed it", f"ALTER SEQUENCE {SEQ_SEQUENCE} CACHE 1"
        ))
    if default is None or SEQ_FUNCTION not in str(default):
        problems.append(SeqPathProblem(
            f"domain_events.seq defaults to {default!r}, not {SEQ_FUNCTION}(): a writer would draw its seq "
            "before it holds a transaction id",
            f"ALTER TABLE domain_events ALTER COLUMN seq SET DEFAULT {SEQ_FUNCTION}()",
        ))
    return problems


def _mssql(conn: Connection) -> list[SeqPathProblem]:
    problems: list[SeqPathProblem] = []
    trigger = conn.execute(
        text("SELECT is_disabled, is_instead_of_trigger FROM sys.triggers "
             "WHERE name = :name AND parent_id = OBJECT_ID('domain_events')"),
        {"name": MSSQL_SEQ_TRIGGER},
    ).first()
    if trigger is None or not trigger.is_instead_of_trigger:
        problems.append(SeqPathProblem(
            f"the INSTEAD OF INSERT trigger {MSSQL_SEQ_TRIGGER} on domain_events is missing"
        ))
    elif trigger.is_disabled:
        problems.append(SeqPathProblem(
            f"the trigger {MSSQL_SEQ_TRIGGER} is disabled: writers would draw seqs without holding a rowversion",
            f"ENABLE TRIGGER {MSSQL_SEQ_TRIGGER} ON domain_events"
        ))
    for kind, name, catalog in (("sequence", MSSQL_SEQ_SEQUENCE, "sys.sequences"),
                                ("ticket table", MSSQL_TICKETS, "sys.tables")):
        found = conn.execute(text(f"SELECT 1 FROM {catalog} WHERE name = :name"), {"name": name}).first()
        if found is None:
            problems.append(SeqPathProblem(f"the {kind} {name} is missing"))
    identity = conn.execute(
        text("SELECT 1 FROM sys.identity_columns WHERE object_id = OBJECT_ID('domain_events') AND name = 'seq'")
    ).first()
    if identity is not None:
        problems.append(SeqPathProblem("domain_events.seq is an IDENTITY: the outbox predates migration 0002 (stamp "
                                       "before seq)"))
    return problems


def _sqlite(conn: Connection) -> list[SeqPathProblem]:
    ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'domain_events'")).scalar()
    if ddl is None or "AUTOINCREMENT" not in str(ddl).upper():
        return [SeqPathProblem("domain_events.seq is not AUTOINCREMENT: SQLite would hand a deleted or rolled-back seq "
                               "out again")]
    return []


def never_skip_problems(conn: Connection) -> list[SeqPathProblem]:
    """What is wrong with the outbox's seq path on this database; empty when all is well."""
    check = {"postgresql": _postgres, "mssql": _mssql, "sqlite": _sqlite}.get(conn.dialect.name)
    return check(conn) if check else []


def check_never_skip(conn: Connection) -> None:
    """Raise `OutboxDamagedError` naming every broken invariant and the repair."""
    problems = never_skip_problems(conn)
    if problems:
        raise OutboxDamagedError(
            "refusing to publish: the outbox can no longer guarantee that no event is skipped: "
            + "; ".join(map(str, problems)) + f". Then start the bridge again (or {_REPAIR})"
        )
