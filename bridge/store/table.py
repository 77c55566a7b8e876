"""`domain_events` beside the tail read: where the outbox ends, its oldest row after a seq, and rows found
inside holes settled earlier. The same plain SQL on every dialect, each on a connection of the pool."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from bridge.core.holes import SeqRange
from bridge.core.records import OutboxRow
from bridge.schema import domain_events
from bridge.store.failures import store_error
from bridge.store.rows import select_after


class OutboxTable:
    """The outbox's lookups that are no part of the tail read; driver errors come out as the store's."""

    __slots__ = ("engine",)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def run(self, doing: str, work: Callable[[Connection], Any]) -> Any:
        """`work` on a connection of the pool; a driver error is reported as the store's, saying what it was `doing`."""
        try:
            with self.engine.connect() as conn:
                return work(conn)
        except DBAPIError as exc:
            raise store_error(exc, doing) from exc

    def head_seq(self) -> int:
        head = self.run("reading the head seq", lambda c: c.execute(select(func.max(domain_events.c.seq))).scalar())
        return int(head or 0)

    def rows_in(self, holes: Sequence[SeqRange]) -> list[int]:
        if not holes:
            return []
        seq = domain_events.c.seq
        query = select(seq).where(or_(*(seq.between(h.first, h.last) for h in holes))).order_by(seq).limit(100)
        found: list[int] = self.run("looking for rows in settled holes",
                                    lambda c: [int(v) for v in c.execute(query).scalars()])
        return found

    def oldest_after(self, seq: int) -> OutboxRow | None:
        rows = self.run("reading the oldest unpublished event", lambda c: select_after(c, seq, 1))
        return rows[0] if rows else None
