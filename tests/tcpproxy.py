"""The part of a fault-injecting TCP proxy that does not depend on the wire protocol.

A `TcpProxy` listens on a free 127.0.0.1 port and opens one upstream connection per client; one thread
per connection (a `Pipe`) frames both directions with a protocol module and asks the proxy's rules
whether to cut at each moment the protocol names. A cut closes both sides at once, as a restart,
failover or network drop does. Counters say how often each moment came by and was cut, so a test can
assert its faults really happened. `tests.faultproxy` (PostgreSQL) and `tests.kafkaproxy` (Kafka) are
the two protocols; `ChunkProxy` (below) reads none and cuts by position, for a protocol the suite cannot
parse (SQL Server's TDS, usually inside TLS).
"""

from __future__ import annotations

import contextlib
import random
import selectors
import socket
import threading
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from sqlalchemy.engine import make_url

#: How often the proxy's threads look at the stop flag.
TICK_S = 0.1
#: How long `stop` waits for the proxy's threads before it calls them leaked.
JOIN_S = 5.0


class CutRule(Protocol):
    """What a protocol's cut description offers the proxy: which moment, how often, how many times."""

    @property
    def moment(self) -> Any: ...

    @property
    def every(self) -> int: ...

    @property
    def times(self) -> int | None: ...

    def matches(self, moment: Any, detail: Any) -> bool:
        """Whether this rule counts an occurrence of `moment` with `detail` (protocol-specific)."""
        ...


@dataclass(slots=True)
class Rule:
    """A cut and how often it has come by and fired."""

    cut: CutRule
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


class TcpProxy(ABC):
    """A proxy on a free 127.0.0.1 port in front of `upstream`; start and stop it with `with`."""

    #: Raised by the protocol's framer when a stream does not frame; the pipe is closed and it is recorded.
    framing_error: type[Exception] = ValueError
    #: Prefix of every thread's name, so a test can check that none outlives the proxy.
    thread_prefix = "tcpproxy"

    def __init__(self, upstream: tuple[str, int], *cuts: CutRule) -> None:
        self.upstream = upstream
        self.rules = [Rule(cut) for cut in cuts]
        #: How often each moment came by, cut or not.
        self.seen: Counter[Any] = Counter()
        #: How many connections were cut at each moment.
        self.cuts: Counter[Any] = Counter()
        #: Streams that did not frame as the protocol's messages (their connections were closed).
        self.errors: list[str] = []
        self.connections = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._pipes: dict[threading.Thread, tuple[socket.socket, socket.socket]] = {}

    @abstractmethod
    def pipe(self, client: socket.socket, server: socket.socket) -> Pipe:
        """The protocol's handler for one new connection."""

    # ------------------------------------------------------------------------------------ lifecycle

    def __enter__(self) -> TcpProxy:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.stop()
        if exc_type is None and self.errors:
            raise self.framing_error(f"the fault proxy could not frame {len(self.errors)} streams: {self.errors[:3]}")

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(TICK_S)
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, name=f"{self.thread_prefix}-accept", daemon=True)
        self._acceptor.start()

    def stop(self) -> None:
        """Close every connection and join every thread; raise if one does not end."""
        self.stopping.set()
        if self._acceptor is not None:
            self._acceptor.join(JOIN_S)
        if self._listener is not None:
            self._listener.close()
        with self.lock:
            pipes = dict(self._pipes)
        for client, server in pipes.values():
            shut(client, server)  # wakes the pipe's thread, which closes its sockets and ends
        leaked = [thread.name for thread in [self._acceptor, *pipes] if thread is not None and _outlives_join(thread)]
        if leaked:
            raise RuntimeError(f"fault proxy threads did not end within {JOIN_S}s: {leaked}")

    @property
    def address(self) -> tuple[str, int]:
        assert self._listener is not None, "start the proxy first"
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    # ---------------------------------------------------------------------------------------- rules

    def add(self, cut: CutRule) -> None:
        """Add a rule while the proxy runs; its occurrences count from now."""
        with self.lock:
            self.rules.append(Rule(cut))

    def reset(self, *cuts: CutRule) -> None:
        """From now on cut by `cuts` only, with every counter back at zero (one proxy, many tests)."""
        with self.lock:
            self.rules = [Rule(cut) for cut in cuts]
            self.seen.clear()
            self.cuts.clear()
            self.errors.clear()
            self.connections = 0

    def decide(self, moment: Any, detail: Any = None, *, new: bool = True) -> bool:
        """Count an occurrence of `moment` (in `seen` only when `new`: not a later step of one already
        counted); True when a rule says to cut the connection here."""
        with self.lock:
            if new:
                self.seen[moment] += 1
            cut = False
            for rule in self.rules:
                if rule.cut.matches(moment, detail):
                    cut = rule.fires() or cut
            if cut:
                self.cuts[moment] += 1
            return cut

    # -------------------------------------------------------------------------------------- sockets

    def _accept(self) -> None:
        assert self._listener is not None
        while not self.stopping.is_set():
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
            pipe = self.pipe(client, server)
            thread = threading.Thread(target=pipe.run, name=f"{self.thread_prefix}-{self.connections}", daemon=True)
            with self.lock:
                self.connections += 1
                self._pipes = {t: s for t, s in self._pipes.items() if t.is_alive()}
                self._pipes[thread] = (client, server)
            thread.start()


class Pipe(ABC):
    """One proxied connection: whole messages forwarded both ways until a rule cuts it or either side ends.

    The two handlers get each chunk read from their side and return False to cut the connection; they
    forward what they let through themselves (`client` and `server` are the two sockets).
    """

    def __init__(self, proxy: TcpProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server

    @abstractmethod
    def client_sent(self, data: bytes) -> bool: ...

    @abstractmethod
    def server_sent(self, data: bytes) -> bool: ...

    def run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.client, selectors.EVENT_READ, self.client_sent)
            selector.register(self.server, selectors.EVENT_READ, self.server_sent)
            try:
                while not self.proxy.stopping.is_set():
                    for key, _ in selector.select(TICK_S):
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data or not key.data(data):
                            return
            except OSError:
                return  # a side went away, or stop() shut the sockets
            except self.proxy.framing_error as exc:
                with self.proxy.lock:
                    self.proxy.errors.append(str(exc))
            finally:
                shut(self.client, self.server)
                self.client.close()
                self.server.close()


def shut(*sockets: socket.socket) -> None:
    """Both directions of each socket: the peer reads end-of-stream, as when a server dies."""
    for sock in sockets:
        with contextlib.suppress(OSError):  # not connected any more
            sock.shutdown(socket.SHUT_RDWR)


def _outlives_join(thread: threading.Thread) -> bool:
    """Join `thread` (bounded); True when it is still alive afterwards."""
    thread.join(JOIN_S)
    return thread.is_alive()


# ------------------------------------------------------------------------------------ cuts by position


class Stream(Enum):
    """Which way a chunk (what one read from a socket returned) was going when it was cut."""

    REQUEST = "request"  # from the client; a cut one never reaches the server
    REPLY = "reply"  # from the server; a cut one reaches the client only in part (possibly not at all)


@dataclass(frozen=True, slots=True)
class ChunkCut:
    """Cut the `every`-th chunk of `moment` (None: of either stream), counted over all connections from
    when the rule is added, at most `times` times (None: no limit). Each connection's first `after`
    chunks of a stream are left alone, so a login completes and every connection gets work done. With
    `chance` below 1, a chunk counts only with that probability, drawn from `seed`: random chunk
    boundaries, the same draws in every run."""

    moment: Stream | None = None
    every: int = 1
    times: int | None = None
    after: int = 0
    chance: float = 1.0
    seed: int = 0
    _draws: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.every < 1 or (self.times is not None and self.times < 1) or self.after < 0 \
                or not 0 < self.chance <= 1:
            raise ValueError(f"a chunk cut needs every >= 1, times >= 1 or None, after >= 0, 0 < chance <= 1: {self}")
        object.__setattr__(self, "_draws", random.Random(self.seed))

    def matches(self, moment: Stream, index: int) -> bool:
        """`index`: the chunk's place in its connection's stream, from 0."""
        if (self.moment is not None and moment is not self.moment) or index < self.after:
            return False
        return self.chance >= 1 or self._draws.random() < self.chance


class ChunkProxy(TcpProxy):
    """A proxy on a free 127.0.0.1 port in front of `upstream` that forwards bytes as they come and cuts
    connections by chunk position (`ChunkCut`), whatever the protocol; `seed` draws how much of a cut
    reply gets through. Start and stop it with `with`."""

    thread_prefix = "chunkproxy"

    def __init__(self, upstream: tuple[str, int], *cuts: ChunkCut, seed: int = 0) -> None:
        super().__init__(upstream, *cuts)
        self._draws = random.Random(seed)

    def __enter__(self) -> ChunkProxy:
        self.start()
        return self

    def pipe(self, client: socket.socket, server: socket.socket) -> _ChunkPipe:
        return _ChunkPipe(self, client, server)

    def url_for(self, db_url: str) -> str:
        """`db_url` (a SQLAlchemy URL of the upstream server, with host and port) rewritten to go through
        this proxy."""
        host, port = self.address
        return make_url(db_url).set(host=host, port=port).render_as_string(hide_password=False)

    def torn(self, chunk: bytes) -> bytes:
        """The part of a cut reply that reaches the client: a prefix, never the whole chunk."""
        with self.lock:
            return chunk[: self._draws.randrange(len(chunk))]


class _ChunkPipe(Pipe):
    """One connection, its chunks counted per stream; the proxy's rules decide by position."""

    proxy: ChunkProxy

    def __init__(self, proxy: ChunkProxy, client: socket.socket, server: socket.socket) -> None:
        super().__init__(proxy, client, server)
        self.requests = 0
        self.replies = 0

    def client_sent(self, data: bytes) -> bool:
        index, self.requests = self.requests, self.requests + 1
        if self.proxy.decide(Stream.REQUEST, index):
            return False
        self.server.sendall(data)
        return True

    def server_sent(self, data: bytes) -> bool:
        index, self.replies = self.replies, self.replies + 1
        if self.proxy.decide(Stream.REPLY, index):
            self.client.sendall(self.proxy.torn(data))
            return False
        self.client.sendall(data)
        return True
