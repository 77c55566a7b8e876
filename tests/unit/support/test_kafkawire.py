"""The Kafka fault proxy's framing, and each moment cut where it says, against an echoing fake broker."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.kafkaproxy import KafkaCut, KafkaFaultProxy, KafkaMoment
from tests.kafkawire import (
    API_VERSIONS,
    METADATA,
    PRODUCE,
    Frame,
    Framer,
    ProtocolError,
    client_id,
    produce_record_count,
    request,
    response,
)

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


def _batch(records: int, payload: bytes = b"r" * 20) -> bytes:
    """A record batch (magic 2) header with `records` as its count, then opaque (compressed) records."""
    header = struct.pack("!qiibIhiqqqhii", 0, 49 + len(payload), 0, 2, 0, 0, records - 1, 0, 0, 7, 0, 0, records)
    return header + payload


def _produce_v7(partitions: dict[int, bytes], correlation_id: int = 1) -> Frame:
    body = struct.pack("!hhii", -1, -1, 30_000, 1) + struct.pack("!h", 1) + b"t"  # no txn id, acks, timeout, 1 topic
    body += struct.pack("!i", len(partitions))
    for index, records in partitions.items():
        body += struct.pack("!ii", index, len(records)) + records
    return Frame(request(PRODUCE, 7, correlation_id, body, client_id="bridge-a"))


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _produce_v9(partitions: dict[int, bytes]) -> Frame:
    body = b"\x00" + b"\x00" + struct.pack("!hi", -1, 30_000) + b"\x02" + b"\x02t"  # tags, null txn id, 1 topic
    body += _uvarint(len(partitions) + 1)
    for index, records in partitions.items():
        body += struct.pack("!i", index) + _uvarint(len(records) + 1) + records + b"\x00"
    body += b"\x00" + b"\x00"  # the topic's tags, the request's
    return Frame(request(PRODUCE, 9, 1, body, client_id="bridge-b"))


def test_a_produce_request_names_its_client_and_counts_the_records_of_every_batch_of_every_partition() -> None:
    partitions = {0: _batch(3) + _batch(4), 2: _batch(5)}
    assert (client_id(_produce_v7(partitions)), produce_record_count(_produce_v7(partitions))) == ("bridge-a", 12)
    assert (client_id(_produce_v9(partitions)), produce_record_count(_produce_v9(partitions))) == ("bridge-b", 12)
    with pytest.raises(ProtocolError):
        produce_record_count(Frame(request(PRODUCE, 9, 3, b"x" * 300)))


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


def test_a_throttled_produce_response_waits_its_delay(broker: _EchoBroker) -> None:
    with KafkaFaultProxy(broker.address) as proxy:
        proxy.throttle(0.1)
        started = time.monotonic()
        received = _exchange(proxy, request(METADATA, 12, 1), _produce_v7({0: _batch(4)}, correlation_id=2).raw)
        held_s = time.monotonic() - started
    assert [f.response_correlation_id for f in Framer(requests=False).feed(received)] == [1, 2]
    assert 0.1 <= held_s < 2, "the Produce response came after the throttle's delay"
    assert [(p.client_id, p.records) for p in proxy.produced] == [("bridge-a", 4)]


def test_lifting_the_throttle_lets_a_held_produce_response_go_at_once(broker: _EchoBroker) -> None:
    with KafkaFaultProxy(broker.address) as proxy:
        proxy.throttle(60)
        lifter = threading.Timer(0.2, proxy.throttle, args=(0,))
        lifter.start()
        started = time.monotonic()
        received = _exchange(proxy, _produce_v9({1: _batch(2)}).raw)
        lifter.join()
    assert [f.response_correlation_id for f in Framer(requests=False).feed(received)] == [1]
    assert time.monotonic() - started < 5
    assert [(p.client_id, p.records) for p in proxy.produced] == [("bridge-b", 2)]
