"""The read ahead: in a backlog, the next read sent on the kept connection before the caller asks for it.

After a full batch the caller will most likely send its rows and ask for the next `limit` after them; the
server runs that read (psycopg's pipeline mode) while the caller sends the batch it has. A read sent ahead
holds its snapshot until it is taken, a few milliseconds later: it is one statement, its answer waiting in
the socket. Only a read of exactly its `after` and `limit` takes it; any other read throws it away unseen. No
read touches the hole rule until it is taken, in the caller's order, so one thrown away (or failed) changes
nothing, and the one taken is as if read then, from a snapshot taken after the last.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.engine import Connection

from bridge.store.postgres.connection import KeptConnection
from bridge.store.postgres.visible import VISIBLE_SQL

log = logging.getLogger("bridge.store.postgres")


class ReadAhead:
    """The visible-rows statement sent ahead on the reads' connection, in psycopg's pipeline mode: the server
    runs it while the caller sends the batch it has, and its answer waits in the socket until `take`.

    The same statement as `PostgresSession.snapshot_rows` and, like it, one snapshot. Until it is taken or
    thrown away nothing else may use the connection. psycopg's errors come unwrapped from here: the reader
    drops the connection and reads again the usual way, which reports any failure as the store's."""

    __slots__ = ("_cursor", "_pipeline", "after", "limit")

    def __init__(self, conn: Connection, cursor: Any, after: int, limit: int) -> None:
        self.after = after
        self.limit = limit
        driver: Any = conn.connection.driver_connection
        self._pipeline = driver.pipeline()
        self._pipeline.__enter__()
        try:
            self._cursor = cursor
            self._cursor.execute(VISIBLE_SQL, {"after": after, "limit": limit})
        except BaseException:
            self._end()
            raise

    def take(self) -> list[tuple[Any, ...]]:
        """The answer: waits for what has not arrived yet, the interpreter's lock released meanwhile."""
        try:
            result: list[tuple[Any, ...]] = self._cursor.fetchall()
        finally:
            self._end()
        return result

    def discard(self) -> None:
        """Leave pipeline mode: psycopg reads the answer (waiting for it) and throws it away."""
        self._end()

    def _end(self) -> None:
        self._pipeline.__exit__(None, None, None)


class ReadsAhead:
    """At most one `ReadAhead` on the kept connection at a time, sent after a full batch and taken only by the
    read it was sent for. A read ahead that fails leaves the connection in an unknown state: it is dropped, and
    the read connects again and reads the usual way, which reports any failure as the store's."""

    __slots__ = ("_ahead", "_kept", "counts")

    def __init__(self, kept: KeptConnection) -> None:
        self._kept = kept
        self._ahead: ReadAhead | None = None
        #: Reads ahead taken as they were, and thrown away (the caller asked for another `after` or `limit`, or
        #: the read failed and was done again).
        self.counts = {"taken": 0, "discarded": 0}

    def send(self, after: int, limit: int) -> None:
        """Send the read of `limit` rows after `after`, when the kept connection is still there."""
        if self._kept.conn is None:
            return
        try:
            # On the cursor kept with the connection, which the usual read uses too: nothing else uses the
            # connection until this one is taken or thrown away.
            self._ahead = ReadAhead(self._kept.conn, self._kept.cursor, after, limit)
        except Exception as exc:  # noqa: BLE001 - the next read connects again, and reports any failure
            self._failed(exc)

    def take(self, after: int, limit: int) -> list[tuple[Any, ...]] | None:
        """The answer of the read ahead sent for exactly this `after` and `limit`; None when there is none (any
        other is thrown away unseen) or it failed."""
        ahead = self._ahead
        if ahead is None:
            return None
        if (ahead.after, ahead.limit) != (after, limit):
            self.counts["discarded"] += 1
            self.drop()
            return None
        self._ahead = None
        try:
            answer = ahead.take()
        except Exception as exc:  # noqa: BLE001 - read again, on a new connection
            self.counts["discarded"] += 1
            self._failed(exc)
            return None
        self.counts["taken"] += 1
        return answer

    def drop(self) -> None:
        """Throw away the read ahead under way, if any (the caller restarts lower down, or closes)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                ahead.discard()
            except Exception as exc:  # noqa: BLE001 - the next read connects again
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        log.info("a read ahead failed; the outbox is read again on a new connection", extra={"error": str(exc)})
        self._kept.invalidate()
