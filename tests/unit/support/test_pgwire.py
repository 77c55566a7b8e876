"""The fault proxy's framing of the PostgreSQL protocol, on bytes recorded from psycopg 3 and PostgreSQL 16."""

from __future__ import annotations

import struct

import pytest

from tests.faultproxy import Cut, Moment, _command
from tests.pgwire import GSSENC_REQUEST, PROTOCOL_3, SSL_REQUEST, Framer, Message, ProtocolError
from tests.tcpproxy import Rule

pytestmark = pytest.mark.unit


def _startup(**params: str) -> bytes:
    body = struct.pack("!I", PROTOCOL_3) + b"".join(f"{k}\0{v}\0".encode() for k, v in params.items()) + b"\0"
    return struct.pack("!I", len(body) + 4) + body


SSL_REQUEST_BYTES = b"\x00\x00\x00\x08\x04\xd2\x16/"  # what libpq sends first (sslmode=prefer)
GSSENC_REQUEST_BYTES = struct.pack("!II", 8, GSSENC_REQUEST)
# A read as SQLAlchemy on psycopg makes it: BEGIN and the end ROLLBACK as simple queries, the statement
# with a bound parameter through the extended protocol.
CLIENT_READ = (
    b"Q\x00\x00\x00\nBEGIN\x00"
    b"P\x00\x00\x00A\x00select n, 'x' || n as t from generate_series(1, $1) n\x00\x00\x01\x00\x00\x00\x15"
    b"B\x00\x00\x00\x16\x00\x00\x00\x01\x00\x01\x00\x01\x00\x00\x00\x02\x00\x02\x00\x01\x00\x00"
    b"D\x00\x00\x00\x06P\x00E\x00\x00\x00\t\x00\x00\x00\x00\x00S\x00\x00\x00\x04"
    b"Q\x00\x00\x00\rROLLBACK\x00"
    b"X\x00\x00\x00\x04"
)
SERVER_RESULT = (
    b"1\x00\x00\x00\x042\x00\x00\x00\x04"
    b"T\x00\x00\x00.\x00\x02n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00"
    b"t\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x19\xff\xff\xff\xff\xff\xff\x00\x00"
    b"D\x00\x00\x00\x11\x00\x02\x00\x00\x00\x011\x00\x00\x00\x02x1"
    b"D\x00\x00\x00\x11\x00\x02\x00\x00\x00\x012\x00\x00\x00\x02x2"
    b"C\x00\x00\x00\rSELECT 2\x00Z\x00\x00\x00\x05T"
)


def _feed_in_pieces(framer: Framer, data: bytes, size: int) -> list[Message]:
    messages: list[Message] = []
    for start in range(0, len(data), size):
        messages += framer.feed(data[start:start + size])
    return messages


@pytest.mark.parametrize("piece", [1, 3, 7, 1000])
def test_a_client_stream_frames_the_same_whatever_the_pieces_it_arrives_in(piece: int) -> None:
    stream = SSL_REQUEST_BYTES + GSSENC_REQUEST_BYTES + _startup(user="bridge", database="outbox") + CLIENT_READ
    framer = Framer(client=True)
    messages = _feed_in_pieces(framer, stream, piece)
    assert [m.kind for m in messages] == [b"", b"", b"", b"Q", b"P", b"B", b"D", b"E", b"S", b"Q", b"X"]
    assert [m.startup_code for m in messages[:3]] == [SSL_REQUEST, GSSENC_REQUEST, PROTOCOL_3]
    assert b"".join(m.raw for m in messages) == stream
    assert framer.pending == 0


def test_statements_are_read_from_simple_queries_and_parse_messages() -> None:
    messages = Framer(client=True).feed(_startup(user="u") + CLIENT_READ)
    assert [m.statement for m in messages if m.statement is not None] == [
        "BEGIN", "select n, 'x' || n as t from generate_series(1, $1) n", "ROLLBACK"]


def test_a_server_stream_is_typed_from_its_first_byte_and_a_partial_message_waits() -> None:
    framer = Framer(client=False)
    assert [m.kind for m in framer.feed(SERVER_RESULT[:-3])] == [b"1", b"2", b"T", b"D", b"D", b"C"]
    assert framer.pending == 3
    assert [m.kind for m in framer.feed(SERVER_RESULT[-3:])] == [b"Z"]


def test_a_length_no_message_can_have_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        Framer(client=False).feed(b"D\x00\x00\x00\x02")


@pytest.mark.parametrize(("statement", "command"), [
    ("ROLLBACK", "ROLLBACK"), ("rollback;", "ROLLBACK"), ("ROLLBACK TO SAVEPOINT sa_1", "ROLLBACK TO"),
    ("COMMIT", "COMMIT"), ("COMMIT PREPARED 'x'", "COMMIT PREPARED"), ("LISTEN outbox_events", "LISTEN"),
    (";", "(empty)"),
])
def test_only_the_end_of_a_transaction_counts_as_rollback_or_commit(statement: str, command: str) -> None:
    (message,) = Framer(client=False).feed(b"Q" + struct.pack("!I", len(statement) + 5) + statement.encode() + b"\0")
    assert _command(message) == command


def test_a_rule_cuts_every_nth_occurrence_up_to_its_limit() -> None:
    rule = Rule(Cut(Moment.ROLLBACK, every=3, times=2))
    assert [rule.fires() for _ in range(12)] == [False, False, True] * 2 + [False] * 6
