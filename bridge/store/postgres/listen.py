"""Waiting for new rows on PostgreSQL: LISTEN on the channel the outbox's insert trigger NOTIFYs when it commits,
so an idle bridge wakes up within milliseconds instead of a polling interval later."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy.engine import URL

from bridge.schema import NOTIFY_CHANNEL
from bridge.store.postgres.connection import application_name

log = logging.getLogger("bridge.store.postgres")

#: Socket reads of pending notifications before a read of the outbox, at most (`Listener.take_pending`). Over TLS
#: each commit's notification comes in a TLS record of its own and one read takes one record, so this is how many
#: commits per read of the outbox the drain keeps up with. 10,000 pending took 42 ms to drain here.
_MAX_NOTIFY_READS = 2_000


class Listener:
    """A psycopg connection of its own, in autocommit, that LISTENs; connected at the first wait. A broken one
    only costs latency: the wait sleeps instead, and the next wait connects again."""

    __slots__ = ("_url", "conn")

    def __init__(self, url: URL) -> None:
        self._url = url
        self.conn: Any = None

    def wait(self, timeout: float) -> None:
        """Block until a NOTIFY from the insert trigger or the timeout; falls back to sleeping."""
        try:
            if self.conn is None:
                self.conn = self._connect()
            for _ in self.notifies(timeout, stop_after=1):
                pass
        except Exception as exc:  # noqa: BLE001 - a broken LISTEN connection only costs latency
            self._lost(exc)
            time.sleep(max(0.0, timeout))

    def take_pending(self) -> None:
        """Take the notifications that arrived so far off the connection, without waiting.

        A read of the outbox answers every notification that arrived before it. A busy bridge seldom waits, and
        notifications left unread fill the connection's buffers until the listening backend blocks, and with it
        the server's notify queue, which every writer's NOTIFY uses."""
        if self.conn is None:
            return
        try:
            # On libpq's own calls (psycopg's documented `pgconn`): read what the socket holds without waiting, and
            # drop the notifications parsed from it, with no Notify decoded for each. Repeat until a read brings
            # none (bounded, should commits keep coming faster than this loop turns).
            pgconn = self.conn.pgconn
            for _ in range(_MAX_NOTIFY_READS):
                pgconn.consume_input()
                if pgconn.notifies() is None:
                    break  # this read brought none
                while pgconn.notifies() is not None:
                    pass
        except Exception as exc:  # noqa: BLE001 - a broken LISTEN connection only costs latency
            self._lost(exc)

    def notifies(self, timeout: float, stop_after: int | None = None) -> Iterator[Any]:
        """The notifications that arrive within `timeout` seconds (at most `stop_after`), taken off the connection."""
        notifies: Iterator[Any] = self.conn.notifies(timeout=timeout, stop_after=stop_after)
        return notifies

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):  # already broken
                self.conn.close()
        self.conn = None

    def _connect(self) -> Any:
        import psycopg

        url = self._url.set(drivername="postgresql")
        named: dict[str, Any] = application_name(url)
        conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True, connect_timeout=5,
                               **named)
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return conn

    def _lost(self, exc: Exception) -> None:
        log.warning("LISTEN connection lost; polling until it is back", extra={"error": str(exc)})
        self.close()
