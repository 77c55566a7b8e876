"""The Kafka fault proxy's framing, and each moment cut where it says, against an echoing fake broker."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from tests.kafkaproxy import KafkaCut, KafkaFaultProxy, KafkaMoment
from tests.kafkawire import API_VERSIONS, METADATA, PRODUCE, Framer, ProtocolError, request, response

pytestmark = pytest.mark.unit

STREAM = request(API_VERSIONS, 3, 1) + request(METADATA, 12, 2, b"\x00" * 9) + request(PRODUCE, 9, 3, b"x" * 300)


@pytest.mark.parametrize("piece", [1, 5, 13, 10_000])
def test_a_request_stream_frames_the_same_whatever_the_pieces_it_arrives_in(piece: int) -> None:
    framer = Framer(requests=True)
    frames = [f for start in range(0, len(STREAM), piece) for f in framer.feed(STREAM[start:start + piece])]
    assert [(f.api_key, f.api_version, f.request_correlation_id) for f in frames] == [
        (API_VERSIONS, 3, 1), (METADATA, 12, 2), (PRODUCE, 9, 3)]
    assert b"".join(f.raw for f in frames) == STREAM
    assert framer.pending == 0


def test_a_response_carries_its_request_correlation_id_and_a_partial_one_waits() -> None:
    framer = Framer(requests=False)
    data = response(7, b"abc") + response(8)
    assert [f.response_correlation_id for f in framer.feed(data[:-1])] == [7]
    assert framer.pending == len(response(8)) - 1
    assert [f.response_correlation_id for f in framer.feed(data[-1:])] == [8]


@pytest.mark.parametrize("size", [-1, 3, 1 << 30])
def test_a_size_no_frame_can_have_is_a_protocol_error(size: int) -> None:
    with pytest.raises(ProtocolError):
        Framer(requests=False).feed(struct.pack("!i", size) + b"\x00" * 8)


class _EchoBroker:
    """Answers every request with a response of the same correlation id; remembers what it got."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.received: list[int] = []  # api keys
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.listener.getsockname()[:2]
        return str(host), int(port)

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        framer = Framer(requests=True)
        with conn, contextlib.suppress(OSError):  # the proxy cut the connection
            while data := conn.recv(65536):
                for frame in framer.feed(data):
                    self.received.append(frame.api_key)
                    conn.sendall(response(frame.request_correlation_id, b"r" * 40))

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


@pytest.fixture()
def broker() -> Iterator[_EchoBroker]:
    fake = _EchoBroker()
    yield fake
    fake.close()


def _exchange(proxy: KafkaFaultProxy, *requests: bytes) -> bytes:
    """Send the requests, then read until the proxy closes the connection."""
    with socket.create_connection(proxy.address, timeout=5) as client:
        client.sendall(b"".join(requests))
        received = b""
        expected = sum(len(response(0, b"r" * 40)) for _ in requests)
        while len(received) < expected and (data := client.recv(65536)):
            received += data
        return received


def test_a_produce_the_broker_wrote_is_never_answered(broker: _EchoBroker) -> None:
    with KafkaFaultProxy(broker.address, KafkaCut(KafkaMoment.PRODUCE_WRITTEN, times=1)) as proxy:
        received = _exchange(proxy, request(API_VERSIONS, 3, 1), request(PRODUCE, 9, 2, b"batch"))
    assert broker.received == [API_VERSIONS, PRODUCE]
    assert [f.response_correlation_id for f in Framer(requests=False).feed(received)] == [1]
    assert proxy.cuts[KafkaMoment.PRODUCE_WRITTEN] == 1


def test_a_produce_cut_on_its_way_never_reaches_the_broker(broker: _EchoBroker) -> None:
    with KafkaFaultProxy(broker.address, KafkaCut(KafkaMoment.PRODUCE)) as proxy:
        received = _exchange(proxy, request(METADATA, 12, 1), request(PRODUCE, 9, 2, b"batch"))
    assert broker.received == [METADATA]
    assert received == b"", "the cut came before the broker's answer to the first request"
    assert proxy.cuts[KafkaMoment.PRODUCE] == 1


def test_a_mid_response_cut_delivers_half_of_the_chosen_response(broker: _EchoBroker) -> None:
    with KafkaFaultProxy(broker.address, KafkaCut(KafkaMoment.MID_RESPONSE, api_key=METADATA)) as proxy:
        received = _exchange(proxy, request(API_VERSIONS, 3, 1), request(METADATA, 12, 2))
    whole = len(response(0, b"r" * 40))
    assert len(received) == whole + whole // 2
    assert proxy.cuts[KafkaMoment.MID_RESPONSE] == 1
    assert proxy.seen[KafkaMoment.MID_RESPONSE] == 2, "every response comes by; only Metadata's count"


def test_every_nth_metadata_request_is_cut(broker: _EchoBroker) -> None:
    with KafkaFaultProxy(broker.address, KafkaCut(KafkaMoment.METADATA, every=3)) as proxy:
        received = _exchange(proxy, *[request(METADATA, 12, n) for n in range(1, 6)])
    assert broker.received == [METADATA, METADATA]
    assert received == b"", "the cut came before the broker's answers"
    assert (proxy.seen[KafkaMoment.METADATA], proxy.cuts[KafkaMoment.METADATA]) == (3, 1)
    assert dict(proxy.requests) == {"Metadata": 3}
