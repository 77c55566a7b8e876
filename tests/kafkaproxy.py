"""A TCP proxy in front of a Kafka broker that cuts connections at chosen protocol moments.

What a broker restart or a network drop does to a producer, on demand: both sides of one connection are
closed when a rule says so. The moments that matter to an idempotent producer are a Produce the broker
never got, a Produce the broker wrote whose response never reached the client (the producer must retry
without duplicating), a response cut halfway, and a Metadata request (how clients find brokers).

The proxy also throttles on demand: `throttle(seconds)` holds each Produce response until that long
after its request reached the broker, as a broker does with a client over its quota (it mutes the
connection meanwhile), so a producer's requests stay in flight and its queue grows. `produced` lists
every Produce request forwarded to the broker (when, which client.id, how many records).

Clients connect to the brokers that metadata names, so the proxy sees every connection only if the
broker advertises the proxy's address (see `tests.proxiedbroker`).

    proxy = KafkaFaultProxy(("127.0.0.1", broker_port), KafkaCut(KafkaMoment.PRODUCE_WRITTEN, every=5))
    with proxy:
        ...  # clients bootstrap at proxy.bootstrap
        assert proxy.cuts[KafkaMoment.PRODUCE_WRITTEN] > 0
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from dataclasses import dataclass
from enum import Enum

from tests.kafkawire import METADATA, PRODUCE, Frame, Framer, ProtocolError, api_name, client_id, produce_record_count
from tests.tcpproxy import CutRule, Pipe, TcpProxy

#: How often a held Produce response looks at the throttle (it may be lifted) and the stop flag.
HOLD_TICK_S = 0.01


class KafkaMoment(Enum):
    """Where in the protocol a connection can be cut."""

    PRODUCE = "produce"  # the client sends a Produce; the broker never gets it
    PRODUCE_WRITTEN = "produce-written"  # the broker answered a Produce (it wrote the batch); the client never learns
    MID_RESPONSE = "mid-response"  # the client got the first half of a response, not the rest
    METADATA = "metadata"  # the client asks for metadata; the broker never gets the request


@dataclass(frozen=True, slots=True)
class KafkaCut:
    """Cut the `every`-th occurrence of `moment` (counted from when the rule is added), at most `times`
    times (None: no limit). MID_RESPONSE counts only responses to requests with `api_key`."""

    moment: KafkaMoment
    every: int = 1
    times: int | None = None
    api_key: int = PRODUCE

    def __post_init__(self) -> None:
        if self.every < 1 or (self.times is not None and self.times < 1):
            raise ValueError(f"a cut needs every >= 1 and times >= 1 or None: {self}")

    def matches(self, moment: KafkaMoment, api_key: int | None) -> bool:
        return moment is self.moment and (api_key is None or api_key == self.api_key)


@dataclass(frozen=True, slots=True)
class ProduceSent:
    """A Produce request the proxy forwarded: the broker appends its records on receipt."""

    at: float  # time.monotonic() when forwarded
    client_id: str | None
    records: int | None  # None: the request did not parse (a test's made-up frame)


class KafkaFaultProxy(TcpProxy):
    """A proxy on a free 127.0.0.1 port in front of the Kafka broker at `upstream`."""

    framing_error = ProtocolError
    thread_prefix = "kafkaproxy"

    def __init__(self, upstream: tuple[str, int], *cuts: KafkaCut) -> None:
        super().__init__(upstream, *cuts)
        #: Requests clients sent, by api name ("Produce", "Metadata", ...): what the client does.
        self.requests: Counter[str] = Counter()
        #: Every Produce request forwarded to the broker, in order.
        self.produced: list[ProduceSent] = []
        self._throttle_s = 0.0

    def __enter__(self) -> KafkaFaultProxy:
        self.start()
        return self

    def reset(self, *cuts: CutRule) -> None:
        super().reset(*cuts)
        with self.lock:
            self.requests.clear()
            self.produced.clear()
            self._throttle_s = 0.0

    def throttle(self, seconds: float) -> None:
        """Hold every Produce response until `seconds` after its request was forwarded; 0 lifts the
        throttle, and what is held goes on at once."""
        with self.lock:
            self._throttle_s = seconds

    def hold(self, forwarded_at: float) -> None:
        """Wait until the response to a Produce forwarded at `forwarded_at` may go, under the throttle."""
        while not self.stopping.is_set():
            with self.lock:
                remaining = forwarded_at + self._throttle_s - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(remaining, HOLD_TICK_S))

    @property
    def bootstrap(self) -> str:
        host, port = self.address
        return f"{host}:{port}"

    def pipe(self, client: socket.socket, server: socket.socket) -> _KafkaPipe:
        return _KafkaPipe(self, client, server)


class _KafkaPipe(Pipe):
    """One Kafka connection: requests are matched to their responses by correlation id."""

    proxy: KafkaFaultProxy

    def __init__(self, proxy: KafkaFaultProxy, client: socket.socket, server: socket.socket) -> None:
        super().__init__(proxy, client, server)
        self.from_client = Framer(requests=True)
        self.from_server = Framer(requests=False)
        # correlation id -> api key of each request not answered yet, and when it was forwarded. A Produce
        # with acks=0 is never answered and would stay here; the bridge always sends acks=all.
        self.unanswered: dict[int, tuple[int, float]] = {}

    def client_sent(self, data: bytes) -> bool:
        forward: list[bytes] = []
        for frame in self.from_client.feed(data):
            api_key = frame.api_key
            with self.proxy.lock:
                self.proxy.requests[api_name(api_key)] += 1
            moment = {PRODUCE: KafkaMoment.PRODUCE, METADATA: KafkaMoment.METADATA}.get(api_key)
            if moment is not None and self.proxy.decide(moment):
                self.server.sendall(b"".join(forward))
                return False
            forwarded_at = time.monotonic()
            self.unanswered[frame.request_correlation_id] = (api_key, forwarded_at)
            if api_key == PRODUCE:
                self._count_produce(frame, forwarded_at)
            forward.append(frame.raw)
        self.server.sendall(b"".join(forward))
        return True

    def server_sent(self, data: bytes) -> bool:
        forward: list[bytes] = []
        for frame in self.from_server.feed(data):
            correlation_id = frame.response_correlation_id
            answered = self.unanswered.pop(correlation_id, None)
            if answered is None:
                raise ProtocolError(f"a response with correlation id {correlation_id} answers no request")
            api_key, forwarded_at = answered
            if api_key == PRODUCE:
                # Throttled: what came before goes now, this response (and so the connection) waits.
                self.client.sendall(b"".join(forward))
                forward.clear()
                self.proxy.hold(forwarded_at)
            if api_key == PRODUCE and self.proxy.decide(KafkaMoment.PRODUCE_WRITTEN):
                self.client.sendall(b"".join(forward))
                return False
            if self.proxy.decide(KafkaMoment.MID_RESPONSE, api_key):
                self.client.sendall(b"".join(forward) + frame.raw[: len(frame.raw) // 2])
                return False
            forward.append(frame.raw)
        self.client.sendall(b"".join(forward))
        return True

    def _count_produce(self, frame: Frame, forwarded_at: float) -> None:
        try:
            records: int | None = produce_record_count(frame)
        except ProtocolError:
            records = None
        with self.proxy.lock:
            self.proxy.produced.append(ProduceSent(forwarded_at, client_id(frame), records))
