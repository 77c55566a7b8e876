"""The PostgreSQL reader, assembled from its parts: the visible-rows read (`visible`) on the kept connection
(`connection`), a read sent ahead in a backlog (`ahead`), LISTEN/NOTIFY to wake up within milliseconds
(`listen`), and what holds the horizon back (`activity`). The read loop is the one every dialect shares
(`bridge.store.reader`): `fetch`, then `settle`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from bridge.core.holes import HoleRule, SeqRange
from bridge.core.records import OutboxRow
from bridge.errors import TransientStoreError
from bridge.store.holders import HorizonHolder
from bridge.store.postgres.activity import horizon_holders
from bridge.store.postgres.ahead import ReadsAhead
from bridge.store.postgres.connection import KeptConnection
from bridge.store.postgres.listen import Listener
from bridge.store.postgres.visible import PostgresSession, read_visible
from bridge.store.reader import Batch, VisibleRows, fetch, settle
from bridge.store.table import OutboxTable

log = logging.getLogger("bridge.store.postgres")


class PostgresReader:
    """PostgreSQL tail: the snapshot horizon, and LISTEN/NOTIFY to wake up within milliseconds."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._table = OutboxTable(engine)
        self._kept = KeptConnection(engine)
        self._ahead = ReadsAhead(self._kept)
        self._listen = Listener(engine.url)
        self._rule = HoleRule()
        #: The answer of the read ahead taken for the read under way, for its session.
        self._answer: list[tuple[Any, ...]] | None = None
        #: The first hole the last read waited on; None when nothing blocks.
        self.waiting_on: SeqRange | None = None

    def poll(self, after: int, limit: int) -> Batch:
        # This read answers every notification that arrived before it: take them off the LISTEN connection.
        self._listen.take_pending()
        reused = self._kept.conn is not None
        try:
            visible = self._read(after, limit)
        except TransientStoreError as exc:
            # The kept connection died while idle (a server restart, a failover, an idle timeout): what the
            # pool's ping on check-out used to catch. A failed read changes nothing, so read again at once
            # on a new connection; only when that fails too is it the database's failure.
            lost = exc.__cause__
            if not (reused and isinstance(lost, DBAPIError) and lost.connection_invalidated):
                raise
            log.info("the outbox read connection was lost between reads; reading again on a new one",
                     extra={"error": str(exc)})
            visible = self._read(after, limit)
        batch = settle(self._rule, after, visible)
        self.waiting_on = batch.waiting_on
        if len(batch.rows) == limit:
            # A backlog: the caller will most likely send these rows and ask for the next `limit` after them.
            self._ahead.send(batch.rows[-1].seq, limit)
        return batch

    def _read(self, after: int, limit: int) -> VisibleRows:
        """One read, answered by the read ahead sent for exactly it when there is one."""
        self._answer = self._ahead.take(after, limit)
        try:
            return fetch(self._session, read_visible, after, limit)
        finally:
            self._answer = None

    def _session(self) -> AbstractContextManager[PostgresSession]:
        """Each read's session: the kept connection, with the read ahead's answer when one was taken for it."""
        return self._kept.session(self._answer)

    def forget_holes(self) -> None:
        # The caller restarts lower down: the read ahead answers nothing it will ask.
        self._ahead.drop()
        self._rule.forget()
        self.waiting_on = None

    @property
    def pending(self) -> tuple[SeqRange, ...]:
        """Holes seen and still waited on."""
        return self._rule.pending

    @property
    def reads_ahead(self) -> dict[str, int]:
        """Reads ahead taken as they were, and thrown away."""
        return self._ahead.counts

    def head_seq(self) -> int:
        return self._table.head_seq()

    def rows_in(self, holes: Sequence[SeqRange]) -> list[int]:
        return self._table.rows_in(holes)

    def oldest_after(self, seq: int) -> OutboxRow | None:
        return self._table.oldest_after(seq)

    def horizon_holder(self) -> HorizonHolder | None:
        """The oldest running transaction, when a hole is waiting on it; None when nothing blocks."""
        waiting_on = self.waiting_on
        if waiting_on is None:
            return None
        holders: list[HorizonHolder] = self._table.run("listing horizon holders",
                                                       lambda c: horizon_holders(c, limit=1))
        if not holders:
            return None
        return replace(holders[0], waiting_on_seq=waiting_on.first)

    def wait(self, timeout: float) -> None:
        """Block until a NOTIFY from the insert trigger or the timeout; falls back to sleeping."""
        self._listen.wait(timeout)

    def close(self) -> None:
        self._ahead.drop()
        log.debug("reads ahead", extra=dict(self.reads_ahead))
        self._listen.close()
        self._kept.drop()
        self.engine.dispose()
