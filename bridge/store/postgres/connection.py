"""The bridge's connections to PostgreSQL: how they are named, and the reads' own connection, kept between reads.

Between reads the kept connection holds no snapshot back from VACUUM: it runs in autocommit, so it is idle
outside a transaction (in a backlog, a read sent ahead holds its own snapshot until the bridge takes it, a few
milliseconds later; see `ahead.ReadAhead`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import URL, Connection, Engine

from bridge.store.postgres.visible import PostgresSession

#: How the bridge's sessions show in PostgreSQL's `pg_stat_activity` (and its logs with `%a`), unless the URL
#: names its own `application_name`.
APPLICATION_NAME = "outbox-bridge"


def application_name(url: URL) -> dict[str, str]:
    """Connection arguments that name the bridge's PostgreSQL sessions; none when the URL names them already."""
    if url.get_backend_name() != "postgresql" or "application_name" in url.query:
        return {}
    return {"application_name": APPLICATION_NAME}


class KeptConnection:
    """The reads' own connection, kept between reads, in autocommit: a caught-up bridge reads hundreds of
    times a second, and a connection checked out of the pool per read cost three more round trips each
    (the pool's ping, BEGIN, and the ROLLBACK on its return) and most of PostgreSQL's work for the bridge.
    A read that fails drops the connection; the next read connects again (and the pool pings then)."""

    __slots__ = ("_engine", "conn", "cursor")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        #: The connection between reads; None until the next read connects.
        self.conn: Connection | None = None
        #: psycopg's own cursor on it, for the reads (`visible.visible_rows`).
        self.cursor: Any = None

    @contextmanager
    def session(self, taken: list[tuple[Any, ...]] | None) -> Iterator[PostgresSession]:
        """One read's session on the kept connection (connected now if there is none), with the answer of a
        read ahead `taken` for this read, if any."""
        if self.conn is None:
            self.conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            self.cursor = self.conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            yield PostgresSession(self.conn, taken, self.cursor)
        except BaseException:
            self.drop()
            raise

    def invalidate(self) -> None:
        """Drop a connection left in an unknown state (a read ahead failed on it): the pool must not reuse it."""
        if self.conn is not None:
            with contextlib.suppress(Exception):  # already broken
                self.conn.invalidate()
        self.drop()

    def drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):  # a connection that failed may be broken already
                self.conn.close()
        self.conn = self.cursor = None
