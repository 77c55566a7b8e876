"""A TCP proxy in front of PostgreSQL that cuts connections at chosen protocol moments.

What a database restart, a failover or a network drop does to a client, on demand: both sides of one
connection are closed at the moment a rule names (the client sends ROLLBACK or COMMIT, a result is
half delivered, a notification is due on a connection that listens), so a test can show that the
bridge loses nothing whichever moment its connection dies at. Counters say how often each moment was
seen and cut, so a test can assert its faults really happened. The sockets, threads and rules are
`tests.tcpproxy`'s; this module is the PostgreSQL part.

    with FaultProxy(("127.0.0.1", 25432), Cut(Moment.ROLLBACK, every=7)) as proxy:
        url = proxy.url_for(db_url)   # the same database, through the proxy
        ...
        assert proxy.cuts[Moment.ROLLBACK] > 0

It can cut every result that names a column (`cut_results_naming`): one query that always fails, the rest
of the connection's work untouched, as a step that keeps failing. It can also hold a result back:
`hold_result(column, min_rows)` holds the next result that names `column` and has at least `min_rows` rows
(the server has run the query; the client waits for its answer, as behind a slow network or a slow server)
until `release()`; `held` is set meanwhile.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from dataclasses import dataclass
from enum import Enum

from sqlalchemy.engine import make_url

from tests.pgwire import (
    COMMAND_COMPLETE,
    DATA_ROW,
    GSSENC_REQUEST,
    NOTIFICATION,
    ROW_DESCRIPTION,
    SSL_REQUEST,
    Framer,
    Message,
    ProtocolError,
    ssl_refused,
)
from tests.tcpproxy import Pipe, TcpProxy


class Moment(Enum):
    """Where in the protocol a connection can be cut."""

    ROLLBACK = "rollback"  # the client sends ROLLBACK; the server never gets it
    COMMIT = "commit"  # the client sends COMMIT; the server never gets it, the client never learns
    MID_RESULT = "mid-result"  # the client got some DataRows of a result, not all of them
    LISTENING = "listening"  # a NOTIFY is due on a connection that issued LISTEN; it is never delivered


@dataclass(frozen=True, slots=True)
class Cut:
    """Cut the `every`-th occurrence of `moment` (counted from when the rule is added), at most `times`
    times (None: no limit). For MID_RESULT, the client gets `after_rows` rows of the result first."""

    moment: Moment
    every: int = 1
    times: int | None = None
    after_rows: int = 2

    def __post_init__(self) -> None:
        if self.every < 1 or (self.times is not None and self.times < 1) or self.after_rows < 0:
            raise ValueError(f"a cut needs every >= 1, times >= 1 or None, after_rows >= 0: {self}")

    def matches(self, moment: Moment, rows: int | None) -> bool:
        """MID_RESULT comes by once per row delivered; it counts when `after_rows` rows are through."""
        return moment is self.moment and (rows is None or rows == self.after_rows)


def _command(message: Message) -> str | None:
    """The statement's first word, upper case (or two, for the forms that are not the moment itself)."""
    statement = message.statement
    if statement is None:
        return None
    words = statement.split(None, 2)
    first = words[0].rstrip(";").upper() if words else ""
    if not first:
        return "(empty)"  # SQLAlchemy's pool pre-ping sends ";"
    if len(words) > 1 and words[1].upper().rstrip(";") in ("TO", "PREPARED"):
        return f"{first} {words[1].upper()}"  # ROLLBACK TO SAVEPOINT, COMMIT PREPARED: not an end of transaction
    return first


_CLIENT_MOMENTS = {"ROLLBACK": Moment.ROLLBACK, "ABORT": Moment.ROLLBACK, "COMMIT": Moment.COMMIT,
                   "END": Moment.COMMIT}


class FaultProxy(TcpProxy):
    """A proxy on a free 127.0.0.1 port in front of PostgreSQL at `upstream`; start and stop it with `with`."""

    framing_error = ProtocolError
    thread_prefix = "faultproxy"

    def __init__(self, upstream: tuple[str, int], *cuts: Cut) -> None:
        super().__init__(upstream, *cuts)
        #: What clients sent, by message type and first word ("Q ROLLBACK", "P SELECT"): what the driver does.
        self.statements: Counter[str] = Counter()
        #: Set while a result is held back (`hold_result`), cleared by `release`.
        self.held = threading.Event()
        self._hold: tuple[bytes, int] | None = None  # armed: (column name, fewest rows)
        self._released = threading.Event()
        self._cut_column: bytes | None = None

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def pipe(self, client: socket.socket, server: socket.socket) -> _PgPipe:
        return _PgPipe(self, client, server)

    def url_for(self, db_url: str) -> str:
        """`db_url` (a SQLAlchemy URL of the upstream server) rewritten to go through this proxy."""
        host, port = self.address
        return make_url(db_url).set(host=host, port=port).render_as_string(hide_password=False)

    def cut_next(self, moment: Moment, after_rows: int = 2) -> None:
        self.add(Cut(moment, every=1, times=1, after_rows=after_rows))

    def cut_results_naming(self, column: str | None) -> None:
        """Cut each connection whose result names `column`, when that result begins (None: stop doing so)."""
        with self.lock:
            self._cut_column = None if column is None else column.encode() + b"\0"

    def cuts_result(self, row_description: Message) -> bool:
        with self.lock:
            return self._cut_column is not None and self._cut_column in row_description.body

    def hold_result(self, column: str, min_rows: int = 1) -> None:
        """Hold back the next result (on any connection) that names `column` and has at least `min_rows`
        rows, until `release()`."""
        with self.lock:
            self._hold = (column.encode(), min_rows)
            self._released.clear()

    def release(self) -> None:
        """Let a held result go on (and disarm a hold not taken yet)."""
        with self.lock:
            self._hold = None
        self._released.set()

    def holds(self, row_description: Message) -> int | None:
        """The fewest rows a result must have to be held, if a hold is armed for one of its columns."""
        with self.lock:
            if self._hold is None or self._hold[0] + b"\0" not in row_description.body:
                return None
            return self._hold[1]

    def take_hold(self) -> bool:
        """Take the armed hold for one result; False if another connection took it first."""
        with self.lock:
            if self._hold is None:
                return False
            self._hold = None
        self.held.set()
        return True

    def wait_released(self) -> None:
        while not self.stopping.is_set() and not self._released.wait(0.05):
            pass
        self.held.clear()


class _PgPipe(Pipe):
    """One PostgreSQL connection: the client's statements and the server's rows are the moments."""

    proxy: FaultProxy

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket) -> None:
        super().__init__(proxy, client, server)
        self.from_client = Framer(client=True)
        self.from_server = Framer(client=False)
        self.listening = False
        self.rows = 0  # DataRows of the current result delivered so far
        self.buffered: list[Message] | None = None  # a result that may be held, until it is complete
        self.hold_rows = 0

    def client_sent(self, data: bytes) -> bool:
        forward: list[bytes] = []
        for message in self.from_client.feed(data):
            if message.startup_code in (SSL_REQUEST, GSSENC_REQUEST):
                self.client.sendall(ssl_refused())  # plain text, so the proxy can read the protocol
                continue
            command = _command(message)
            if command is not None:
                with self.proxy.lock:
                    self.proxy.statements[f"{message.kind.decode()} {command}"] += 1
                self.listening = self.listening or command == "LISTEN"
                moment = _CLIENT_MOMENTS.get(command)
                if moment is not None and self.proxy.decide(moment):
                    self.server.sendall(b"".join(forward))
                    return False
            forward.append(message.raw)
        self.server.sendall(b"".join(forward))
        return True

    def server_sent(self, data: bytes) -> bool:
        forward: list[bytes] = []
        for message in self.from_server.feed(data):
            if self.buffered is not None:
                self.buffered.append(message)
                if message.kind == COMMAND_COMPLETE:
                    result, self.buffered = self.buffered, None
                    rows = sum(m.kind == DATA_ROW for m in result)
                    if rows >= self.hold_rows and self.proxy.take_hold():
                        self.client.sendall(b"".join(forward))
                        forward.clear()
                        self.proxy.wait_released()
                    forward.extend(m.raw for m in result)
                continue
            if message.kind == ROW_DESCRIPTION and self.proxy.cuts_result(message):
                self.client.sendall(b"".join(forward))
                return False
            if message.kind == ROW_DESCRIPTION:
                hold_rows = self.proxy.holds(message)
                if hold_rows is not None:
                    self.buffered, self.hold_rows = [message], hold_rows
                    continue
            cut = False
            if message.kind in (ROW_DESCRIPTION, COMMAND_COMPLETE):
                self.rows = 0
            elif message.kind == DATA_ROW:
                cut = self.proxy.decide(Moment.MID_RESULT, self.rows, new=self.rows == 0)
                self.rows += 1
            elif message.kind == NOTIFICATION and self.listening:
                cut = self.proxy.decide(Moment.LISTENING)
            if cut:
                self.client.sendall(b"".join(forward))
                return False
            forward.append(message.raw)
        self.client.sendall(b"".join(forward))
        return True
