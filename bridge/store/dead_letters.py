"""Dead letters in the database: each poison row a bridge name sent to its dead-letter topic, kept open
until an operator republishes it or resolves it with a reason.

The daemon writes them in the transaction that persists its watermark past them
(`OffsetStore.persist`), so a dead letter is on record before retention could delete its row; while one is
open, retention and `cleanup` keep the row (`bridge.store.deletable`). A row dead-lettered again after a
rewind opens its record again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.engine import Connection

from bridge.schema import as_utc, bridge_dead_letters

OPEN: Final = "open"
RESOLVED: Final = "resolved"
REPUBLISHED: Final = "republished"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What the daemon records of a row it sent to the dead-letter topic."""

    seq: int
    event_id: str
    aggregate_type: str
    aggregate_id: str
    reason: str
    dead_letter_topic: str
    payload_bytes: int
    payload_truncated: bool


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """A dead letter as `outbox-bridge dead-letters list` shows it."""

    bridge_name: str
    seq: int
    event_id: str
    aggregate_type: str
    aggregate_id: str
    reason: str
    dead_letter_topic: str
    payload_bytes: int
    payload_truncated: bool
    dead_lettered_at: datetime
    status: str
    resolved_at: datetime | None
    resolved_by: str | None
    resolution: str | None

    def as_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "bridge_name": self.bridge_name, "seq": self.seq, "event_id": self.event_id,
            "aggregate_type": self.aggregate_type, "aggregate_id": self.aggregate_id, "reason": self.reason,
            "dead_letter_topic": self.dead_letter_topic, "payload_bytes": self.payload_bytes,
            "payload_truncated": self.payload_truncated, "status": self.status,
            "dead_lettered_at": self.dead_lettered_at.isoformat(timespec="seconds"),
            "age_s": round((now - self.dead_lettered_at).total_seconds(), 1),
            "resolved_at": self.resolved_at.isoformat(timespec="seconds") if self.resolved_at else None,
            "resolved_by": self.resolved_by, "resolution": self.resolution,
        }


@dataclass(frozen=True, slots=True)
class OpenDeadLetters:
    """How many dead letters of a name are open, and since when the oldest."""

    count: int
    oldest_at: datetime | None


def record(conn: Connection, bridge_name: str, letters: Iterable[DeadLetter], now: datetime) -> None:
    """Record dead letters in `conn`'s transaction: a new one is inserted, a known one opened again."""
    table = bridge_dead_letters
    for letter in letters:
        values = {"event_id": letter.event_id, "aggregate_type": letter.aggregate_type,
                  "aggregate_id": letter.aggregate_id, "reason": letter.reason,
                  "dead_letter_topic": letter.dead_letter_topic, "payload_bytes": letter.payload_bytes,
                  "payload_truncated": int(letter.payload_truncated), "dead_lettered_at": now, "status": OPEN,
                  "resolved_at": None, "resolved_by": None, "resolution": None}
        known = conn.execute(update(table).where(table.c.bridge_name == bridge_name, table.c.seq == letter.seq)
                             .values(**values))
        if known.rowcount == 0:
            conn.execute(insert(table).values(bridge_name=bridge_name, seq=letter.seq, **values))


def open_summary(conn: Connection, bridge_name: str) -> OpenDeadLetters:
    table = bridge_dead_letters
    count, oldest = conn.execute(
        select(func.count(), func.min(table.c.dead_lettered_at))
        .where(table.c.bridge_name == bridge_name, table.c.status == OPEN)
    ).one()
    return OpenDeadLetters(int(count or 0), as_utc(oldest) if oldest is not None else None)


def listed(conn: Connection, bridge_name: str, *, statuses: Sequence[str] = (OPEN,),
           from_seq: int | None = None, to_seq: int | None = None) -> list[DeadLetterRow]:
    """A name's dead letters with these statuses, optionally within a seq range, in seq order."""
    table = bridge_dead_letters
    where = [table.c.bridge_name == bridge_name, table.c.status.in_(statuses)]
    if from_seq is not None:
        where.append(table.c.seq >= from_seq)
    if to_seq is not None:
        where.append(table.c.seq <= to_seq)
    rows = conn.execute(select(table).where(and_(*where)).order_by(table.c.seq)).mappings()
    return [
        DeadLetterRow(
            bridge_name=r["bridge_name"], seq=int(r["seq"]), event_id=r["event_id"],
            aggregate_type=r["aggregate_type"], aggregate_id=r["aggregate_id"], reason=r["reason"],
            dead_letter_topic=r["dead_letter_topic"], payload_bytes=int(r["payload_bytes"]),
            payload_truncated=bool(r["payload_truncated"]), dead_lettered_at=as_utc(r["dead_lettered_at"]),
            status=r["status"], resolved_at=as_utc(r["resolved_at"]) if r["resolved_at"] is not None else None,
            resolved_by=r["resolved_by"], resolution=r["resolution"],
        )
        for r in rows
    ]


def close(conn: Connection, bridge_name: str, seqs: Sequence[int], status: str, by: str, resolution: str,
          now: datetime) -> list[int]:
    """Mark these open dead letters `resolved` or `republished`; returns the seqs that were open."""
    table = bridge_dead_letters
    closed = []
    for seq in seqs:
        result = conn.execute(
            update(table).where(table.c.bridge_name == bridge_name, table.c.seq == seq, table.c.status == OPEN)
            .values(status=status, resolved_at=now, resolved_by=by, resolution=resolution)
        )
        if result.rowcount == 1:
            closed.append(seq)
    return closed


#: Every status, for listings that show closed dead letters too.
DEAD_LETTER_STATUSES: Final = (OPEN, RESOLVED, REPUBLISHED)
