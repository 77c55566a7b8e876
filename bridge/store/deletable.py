"""What retention and `cleanup` may delete from the outbox, and the record of what they deleted.

A row may go only once every registered bridge name has published it: below the lowest watermark of the
names that are not retired, below every pending rewind, and never while a dead letter for it is open.
Each run records the seqs it deleted (`bridge_deletions`), batch by batch in the batch's own transaction,
so a bridge whose watermark is below them knows its rows are gone (`bridge.daemon.history`) instead of
passing them over as rolled-back holes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, case, exists, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from bridge.schema import (
    as_utc,
    bridge_dead_letters,
    bridge_deletions,
    bridge_offsets,
    bridge_replay_audit,
    domain_events,
)
from bridge.store.dead_letters import OPEN


def hold_offsets(conn: Connection, bridge_name: str | None = None) -> None:
    """Take one name's offsets row (or, with None, every name's) for the rest of `conn`'s transaction.

    Cleanup and a rewind request each decide from what they read (watermarks and pending rewinds; the
    oldest row left) and then write: both hold the rows they read while they do, so one always sees what
    the other committed. A no-op UPDATE rather than SELECT ... FOR UPDATE because it locks on every
    dialect: row locks on PostgreSQL and SQL Server, the database's write lock on SQLite (where a plain
    SELECT would not even begin the transaction).
    """
    statement = update(bridge_offsets).values(watermark=bridge_offsets.c.watermark)
    if bridge_name is not None:
        statement = statement.where(bridge_offsets.c.bridge_name == bridge_name)
    conn.execute(statement)


@dataclass(frozen=True, slots=True)
class Deletable:
    """The highest seq cleanup may delete, and what holds it there."""

    limit: int
    #: The name whose watermark (or pending rewind) is the limit, when that is below `own`'s watermark.
    held_back_by: str | None
    #: Its watermark, or its pending rewind's from_seq - 1.
    held_back_at: int | None
    #: The lowest pending rewind's from_seq, of any name (None when none is pending).
    rewind_from: int | None


def deletable(conn: Connection, own: str) -> Deletable:
    """What every registered name has published and no pending rewind needs again. Read under
    `hold_offsets(conn)` to act on it. With no registered name, nothing is deletable."""
    names = {row.bridge_name: int(row.watermark) for row in conn.execute(
        select(bridge_offsets.c.bridge_name, bridge_offsets.c.watermark).where(bridge_offsets.c.retired_at.is_(None)))}
    audit = bridge_replay_audit
    rewinds = {row.bridge_name: int(row.from_seq) for row in conn.execute(
        select(audit.c.bridge_name, func.min(audit.c.from_seq).label("from_seq"))
        .where(audit.c.mode == "rewind", audit.c.status == "pending").group_by(audit.c.bridge_name))}
    bounds = dict(names)
    for name, from_seq in rewinds.items():
        bounds[name] = min(bounds.get(name, from_seq - 1), from_seq - 1)
    if not bounds:
        return Deletable(0, None, None, None)
    holder = min(bounds, key=lambda name: (bounds[name], name != own, name))
    limit = bounds[holder]
    own_limit = names.get(own)
    held = holder != own and (own_limit is None or limit < own_limit)
    return Deletable(limit, holder if held else None, limit if held else None,
                     min(rewinds.values()) if rewinds else None)


def no_open_dead_letter() -> ColumnElement[bool]:
    """`domain_events` rows that no bridge name has an open dead letter for."""
    letters = bridge_dead_letters
    return ~exists().where(letters.c.seq == domain_events.c.seq, letters.c.status == OPEN)


def kept_rows(limit: int, cutoff: datetime) -> ColumnElement[bool]:
    """Rows old enough and published by every name that are kept for an open dead letter."""
    return and_(domain_events.c.seq <= limit, domain_events.c.occurred_at < cutoff, ~no_open_dead_letter())


def record_deletion(conn: Connection, run: int | None, deleted_by: str, seqs: list[int], now: datetime) -> int:
    """Record a batch of deleted seqs in `conn`'s transaction, as a new run or added to `run`; returns the run."""
    if run is None:
        result = conn.execute(insert(bridge_deletions).values(
            first_seq=min(seqs), through_seq=max(seqs), row_count=len(seqs), deleted_by=deleted_by[:255],
            started_at=now, finished_at=now))
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])
    runs = bridge_deletions
    conn.execute(update(runs).where(runs.c.id == run).values(
        first_seq=case((runs.c.first_seq > min(seqs), min(seqs)), else_=runs.c.first_seq),
        through_seq=case((runs.c.through_seq < max(seqs), max(seqs)), else_=runs.c.through_seq),
        row_count=runs.c.row_count + len(seqs), finished_at=now))
    return run


@dataclass(frozen=True, slots=True)
class Deleted:
    """Seqs above a watermark that retention or cleanup deleted: from the first run to the last."""

    first_seq: int
    through_seq: int
    runs: int
    first_at: datetime
    last_at: datetime
    by: tuple[str, ...]

    def describe(self) -> str:
        who = ", ".join(self.by)
        when = self.first_at.isoformat(timespec="seconds")
        if self.runs > 1:
            when += f" to {self.last_at.isoformat(timespec='seconds')}"
        return (f"seqs {self.first_seq} to {self.through_seq} (some or all of them) were deleted {when} "
                f"by {who} ({self.runs} run{'s' if self.runs != 1 else ''})")


def deleted_above(conn: Connection, watermark: int) -> Deleted | None:
    """What cleanup deleted above `watermark`, or None when it deleted nothing there."""
    runs = bridge_deletions
    rows = conn.execute(select(runs).where(runs.c.through_seq > watermark).order_by(runs.c.id)).mappings().all()
    if not rows:
        return None
    return Deleted(
        first_seq=max(watermark + 1, min(int(r["first_seq"]) for r in rows)),
        through_seq=max(int(r["through_seq"]) for r in rows),
        runs=len(rows),
        first_at=min(as_utc(r["started_at"]) for r in rows),
        last_at=max(as_utc(r["finished_at"]) for r in rows),
        by=tuple(dict.fromkeys(str(r["deleted_by"]) for r in rows)),
    )


def deleted_through(conn: Connection) -> int:
    """The highest seq retention or cleanup ever deleted (0 when none)."""
    return int(conn.execute(select(func.max(bridge_deletions.c.through_seq))).scalar() or 0)
