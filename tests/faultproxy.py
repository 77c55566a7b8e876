"""A TCP proxy in front of PostgreSQL that cuts connections at chosen protocol moments.

What a database restart, a failover or a network drop does to a client, on demand: both sides of one
connection are closed at the moment a rule names (the client sends ROLLBACK or COMMIT, a result is
half delivered, a notification is due on a connection that listens), so a test can show that the
bridge loses nothing whichever moment its connection dies at. Counters say how often each moment was
seen and cut, so a test can assert its faults really happened.

    with FaultProxy(("127.0.0.1", 25432), Cut(Moment.ROLLBACK, every=7)) as proxy:
        url = proxy.url_for(db_url)   # the same database, through the proxy
        ...
        assert proxy.cuts[Moment.ROLLBACK] > 0
"""

from __future__ import annotations

import contextlib
import selectors
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

#: How often the proxy's threads look at the stop flag.
TICK_S = 0.1
#: How long `stop` waits for the proxy's threads before it calls them leaked.
JOIN_S = 5.0


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


@dataclass(slots=True)
class _Rule:
    cut: Cut
    occurrences: int = 0
    done: int = 0

    def fires(self) -> bool:
        """Count one occurrence; True when this one is to be cut."""
        if self.cut.times is not None and self.done >= self.cut.times:
            return False
        self.occurrences += 1
        if self.occurrences % self.cut.every:
            return False
        self.done += 1
        return True


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


class FaultProxy:
    """A proxy on a free 127.0.0.1 port in front of `upstream`; start and stop it with `with`."""

    def __init__(self, upstream: tuple[str, int], *cuts: Cut) -> None:
        self.upstream = upstream
        self.rules = [_Rule(cut) for cut in cuts]
        #: How often each moment came by, cut or not.
        self.seen: Counter[Moment] = Counter()
        #: How many connections were cut at each moment.
        self.cuts: Counter[Moment] = Counter()
        #: What clients sent, by message type and first word ("Q ROLLBACK", "P SELECT"): what the driver does.
        self.statements: Counter[str] = Counter()
        #: Streams that did not frame as PostgreSQL messages (their connections were closed).
        self.errors: list[str] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._pipes: dict[threading.Thread, tuple[socket.socket, socket.socket]] = {}

    # ------------------------------------------------------------------------------------ lifecycle

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.stop()
        if exc_type is None and self.errors:
            raise ProtocolError(f"the fault proxy could not frame {len(self.errors)} streams: {self.errors[:3]}")

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(TICK_S)
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, name="faultproxy-accept", daemon=True)
        self._acceptor.start()

    def stop(self) -> None:
        """Close every connection and join every thread; raise if one does not end."""
        self._stop.set()
        if self._acceptor is not None:
            self._acceptor.join(JOIN_S)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            pipes = dict(self._pipes)
        for client, server in pipes.values():
            _shut(client, server)  # wakes the pipe's thread, which closes its sockets and ends
        leaked = [thread.name for thread in [self._acceptor, *pipes] if thread is not None and _outlives_join(thread)]
        if leaked:
            raise RuntimeError(f"fault proxy threads did not end within {JOIN_S}s: {leaked}")

    @property
    def address(self) -> tuple[str, int]:
        assert self._listener is not None, "start the proxy first"
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    def url_for(self, db_url: str) -> str:
        """`db_url` (a SQLAlchemy URL of the upstream server) rewritten to go through this proxy."""
        host, port = self.address
        return make_url(db_url).set(host=host, port=port).render_as_string(hide_password=False)

    # ---------------------------------------------------------------------------------------- rules

    def add(self, cut: Cut) -> None:
        """Add a rule while the proxy runs; its occurrences count from now."""
        with self._lock:
            self.rules.append(_Rule(cut))

    def cut_next(self, moment: Moment, after_rows: int = 2) -> None:
        self.add(Cut(moment, every=1, times=1, after_rows=after_rows))

    def _decide(self, moment: Moment, rows: int | None = None) -> bool:
        """Count an occurrence of `moment` (for MID_RESULT: `rows` rows of a result already delivered)."""
        with self._lock:
            if rows in (None, 0):
                self.seen[moment] += 1
            cut = False
            for rule in self.rules:
                if rule.cut.moment is moment and (rows is None or rows == rule.cut.after_rows):
                    cut = rule.fires() or cut
            if cut:
                self.cuts[moment] += 1
            return cut

    # -------------------------------------------------------------------------------------- sockets

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by stop()
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()  # the client sees what it would see with the server down
                continue
            # Blocking sends: a peer that stops reading holds its pipe until stop() shuts the sockets.
            client.settimeout(None)
            server.settimeout(None)
            pipe = _Pipe(self, client, server)
            thread = threading.Thread(target=pipe.run, name=f"faultproxy-{self.connections}", daemon=True)
            with self._lock:
                self.connections += 1
                self._pipes = {t: s for t, s in self._pipes.items() if t.is_alive()}
                self._pipes[thread] = (client, server)
            thread.start()


class _Pipe:
    """One proxied connection: whole messages forwarded both ways until a rule cuts it or either side ends."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.from_client = Framer(client=True)
        self.from_server = Framer(client=False)
        self.listening = False
        self.rows = 0  # DataRows of the current result delivered so far

    def run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.client, selectors.EVENT_READ, self._client_sent)
            selector.register(self.server, selectors.EVENT_READ, self._server_sent)
            try:
                while not self.proxy._stop.is_set():
                    for key, _ in selector.select(TICK_S):
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data or not key.data(data):
                            return
            except OSError:
                return  # a side went away, or stop() shut the sockets
            except ProtocolError as exc:
                with self.proxy._lock:
                    self.proxy.errors.append(str(exc))
            finally:
                _shut(self.client, self.server)
                self.client.close()
                self.server.close()

    def _client_sent(self, data: bytes) -> bool:
        forward: list[bytes] = []
        for message in self.from_client.feed(data):
            if message.startup_code in (SSL_REQUEST, GSSENC_REQUEST):
                self.client.sendall(ssl_refused())  # plain text, so the proxy can read the protocol
                continue
            command = _command(message)
            if command is not None:
                with self.proxy._lock:
                    self.proxy.statements[f"{message.kind.decode()} {command}"] += 1
                self.listening = self.listening or command == "LISTEN"
                moment = _CLIENT_MOMENTS.get(command)
                if moment is not None and self.proxy._decide(moment):
                    self.server.sendall(b"".join(forward))
                    return False
            forward.append(message.raw)
        self.server.sendall(b"".join(forward))
        return True

    def _server_sent(self, data: bytes) -> bool:
        forward: list[bytes] = []
        for message in self.from_server.feed(data):
            cut = False
            if message.kind in (ROW_DESCRIPTION, COMMAND_COMPLETE):
                self.rows = 0
            elif message.kind == DATA_ROW:
                cut = self.proxy._decide(Moment.MID_RESULT, rows=self.rows)
                self.rows += 1
            elif message.kind == NOTIFICATION and self.listening:
                cut = self.proxy._decide(Moment.LISTENING)
            if cut:
                self.client.sendall(b"".join(forward))
                return False
            forward.append(message.raw)
        self.client.sendall(b"".join(forward))
        return True


def _shut(*sockets: socket.socket) -> None:
    """Both directions of each socket: the peer reads end-of-stream, as when a server dies."""
    for sock in sockets:
        with contextlib.suppress(OSError):  # not connected any more
            sock.shutdown(socket.SHUT_RDWR)


def _outlives_join(thread: threading.Thread) -> bool:
    """Join `thread` (bounded); True when it is still alive afterwards."""
    thread.join(JOIN_S)
    return thread.is_alive()
