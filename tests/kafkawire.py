"""Just enough of the Kafka wire protocol to find message boundaries and name a request.

Every request and response is an Int32 (big-endian) size that does not count itself, then that many
bytes. A request header starts with api_key Int16, api_version Int16, correlation_id Int32 (then the
client id and, in flexible versions, tagged fields); a response header starts with the correlation_id
of its request. Responses on one connection come in the order of their requests, except that a
Produce with acks=0 gets none; the proxy matches them by correlation_id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: Larger than any message a test sends or reads: a size above it means the framing went wrong.
MAX_MESSAGE = 256 * 1024 * 1024

# The api keys this suite names (the rest are counted by number).
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
FIND_COORDINATOR = 10
API_VERSIONS = 18
CREATE_TOPICS = 19
INIT_PRODUCER_ID = 22
DESCRIBE_CONFIGS = 32

API_NAMES = {PRODUCE: "Produce", FETCH: "Fetch", LIST_OFFSETS: "ListOffsets", METADATA: "Metadata",
             FIND_COORDINATOR: "FindCoordinator", API_VERSIONS: "ApiVersions", CREATE_TOPICS: "CreateTopics",
             INIT_PRODUCER_ID: "InitProducerId", DESCRIBE_CONFIGS: "DescribeConfigs"}


class ProtocolError(Exception):
    """The bytes do not frame as Kafka messages: a bug in the proxy or a peer that is not Kafka."""


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, f"api-{api_key}")


@dataclass(frozen=True, slots=True)
class Frame:
    """One request or response as it went over the wire, size prefix included."""

    raw: bytes

    @property
    def api_key(self) -> int:
        """A request's api key (meaningless for a response)."""
        return int(struct.unpack_from("!h", self.raw, 4)[0])

    @property
    def api_version(self) -> int:
        return int(struct.unpack_from("!h", self.raw, 6)[0])

    @property
    def request_correlation_id(self) -> int:
        return int(struct.unpack_from("!i", self.raw, 8)[0])

    @property
    def response_correlation_id(self) -> int:
        return int(struct.unpack_from("!i", self.raw, 4)[0])


class Framer:
    """Splits one direction's byte stream into whole frames, keeping a partial one for the next feed."""

    def __init__(self, *, requests: bool) -> None:
        self._header = 12 if requests else 8  # the smallest header each direction can carry
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= 4:
            (size,) = struct.unpack_from("!i", self._buffer, 0)
            if size < self._header - 4 or size > MAX_MESSAGE:
                raise ProtocolError(f"a frame claims size {size}: the stream is not framed as Kafka")
            if len(self._buffer) < size + 4:
                break
            frames.append(Frame(bytes(self._buffer[:size + 4])))
            del self._buffer[:size + 4]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held back because the frame they start is not complete yet."""
        return len(self._buffer)


def request(api_key: int, api_version: int, correlation_id: int, body: bytes = b"", client_id: str = "t") -> bytes:
    """A request frame with a v1 header (tests build streams with it)."""
    name = client_id.encode()
    payload = struct.pack("!hhih", api_key, api_version, correlation_id, len(name)) + name + body
    return struct.pack("!i", len(payload)) + payload


def response(correlation_id: int, body: bytes = b"") -> bytes:
    """A response frame with a v0 header."""
    payload = struct.pack("!i", correlation_id) + body
    return struct.pack("!i", len(payload)) + payload


# ------------------------------------------------------------------------------ inside a Produce request

#: The first Produce version with flexible (compact, tagged) encoding, and the first naming topics by id.
_PRODUCE_FLEXIBLE = 9
_PRODUCE_TOPIC_IDS = 13
#: Where a record batch (magic 2) keeps its length and its record count.
_BATCH_LENGTH_AT = 8
_BATCH_COUNT_AT = 57


class _Reader:
    """Reads Kafka's primitive types from one frame, front to back."""

    def __init__(self, raw: bytes, at: int) -> None:
        self.raw = raw
        self.at = at

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.raw, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.raw[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def skip(self, count: int) -> None:
        if count < 0 or self.at + count > len(self.raw):
            raise ProtocolError(f"a field of {count} bytes at {self.at} runs past the frame")
        self.at += count

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.skip(self.uvarint())


def client_id(frame: Frame) -> str | None:
    """The client.id a request names (request header v1 and later: every request a client sends)."""
    size = int(struct.unpack_from("!h", frame.raw, 12)[0])
    return None if size < 0 else frame.raw[14:14 + size].decode(errors="replace")


def produce_record_count(frame: Frame) -> int:
    """How many records a Produce request (v3 and later: record batches) carries, over all its partitions.

    Only the batch headers are read (the records may be compressed); raises ProtocolError when the
    frame does not parse as a Produce request."""
    try:
        return _produce_record_count(frame)
    except (struct.error, IndexError) as exc:
        raise ProtocolError(f"not a Produce request v3 or later: {exc}") from exc


def _produce_record_count(frame: Frame) -> int:
    flexible = frame.api_version >= _PRODUCE_FLEXIBLE
    reader = _Reader(frame.raw, 12)
    reader.skip(max(0, reader.fixed("!h")))  # client id
    if flexible:
        reader.tags()
        reader.skip(max(0, reader.uvarint() - 1))  # transactional id
    else:
        reader.skip(max(0, reader.fixed("!h")))
    reader.skip(2 + 4)  # acks, timeout
    records = 0
    for _ in range(reader.uvarint() - 1 if flexible else reader.fixed("!i")):  # topics
        if frame.api_version >= _PRODUCE_TOPIC_IDS:
            reader.skip(16)
        elif flexible:
            reader.skip(reader.uvarint() - 1)
        else:
            reader.skip(reader.fixed("!h"))
        for _ in range(reader.uvarint() - 1 if flexible else reader.fixed("!i")):  # partitions
            reader.skip(4)  # partition index
            size = reader.uvarint() - 1 if flexible else reader.fixed("!i")
            start = reader.at
            reader.skip(max(0, size))
            at = start
            while at < start + size:  # one or more record batches
                length = int(struct.unpack_from("!i", frame.raw, at + _BATCH_LENGTH_AT)[0])
                if length < _BATCH_COUNT_AT + 4 - 12:
                    raise ProtocolError(f"a record batch of {length} bytes at {at} is shorter than its header")
                records += int(struct.unpack_from("!i", frame.raw, at + _BATCH_COUNT_AT)[0])
                at += 12 + length
            if flexible:
                reader.tags()
        if flexible:
            reader.tags()
    return records
