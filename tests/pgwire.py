"""Just enough of the PostgreSQL wire protocol (version 3) to find message boundaries and name a message.

A connection starts with untyped messages from the client (Int32 length, Int32 code: an SSLRequest or
GSSENCRequest, then the StartupMessage); after the StartupMessage every message either way is typed
(one type byte, Int32 length that counts itself, body). The fault proxy answers SSLRequest and
GSSENCRequest itself with 'N', so the server's stream is typed from its first byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
PROTOCOL_3 = 196608

#: Larger than any message a test sends or reads: a length above it means the framing went wrong.
MAX_MESSAGE = 64 * 1024 * 1024

# Message types this suite looks at.
QUERY = b"Q"  # client: simple query
PARSE = b"P"  # client: extended protocol, the statement text
ROW_DESCRIPTION = b"T"  # server: a result starts
DATA_ROW = b"D"  # server: one row of a result
COMMAND_COMPLETE = b"C"  # server: a result ends
NOTIFICATION = b"A"  # server: a NOTIFY for a channel the connection listens on
READY_FOR_QUERY = b"Z"


class ProtocolError(Exception):
    """The bytes do not frame as PostgreSQL messages: a bug in the proxy or a non-PostgreSQL peer."""


@dataclass(frozen=True, slots=True)
class Message:
    """One message as it went over the wire; `kind` is b"" for an untyped startup-phase message."""

    kind: bytes
    raw: bytes

    @property
    def body(self) -> bytes:
        return self.raw[5:] if self.kind else self.raw[4:]

    @property
    def startup_code(self) -> int | None:
        """The request code (or protocol version) of an untyped message; None for a typed one."""
        if self.kind:
            return None
        return int(struct.unpack("!I", self.raw[4:8])[0])

    @property
    def statement(self) -> str | None:
        """The SQL text a client sends in a simple Query or an extended-protocol Parse, else None."""
        if self.kind == QUERY:
            text = self.body
        elif self.kind == PARSE:
            text = self.body[self.body.index(b"\0") + 1:]  # after the prepared statement's name
        else:
            return None
        return text[: text.index(b"\0")].decode("utf-8", "replace")


def ssl_refused() -> bytes:
    """The server's one-byte answer refusing SSL or GSS encryption: the client goes on in plain text."""
    return b"N"


class Framer:
    """Splits one direction's byte stream into whole messages, keeping a partial one for the next feed.

    A client stream starts untyped and turns typed after its StartupMessage (an SSLRequest or
    GSSENCRequest is followed by another untyped message); a server stream is typed throughout.
    """

    def __init__(self, *, client: bool) -> None:
        self._untyped = client
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        self._buffer += data
        messages: list[Message] = []
        while True:
            message = self._next()
            if message is None:
                return messages
            messages.append(message)

    @property
    def pending(self) -> int:
        """Bytes held back because the message they start is not complete yet."""
        return len(self._buffer)

    def _next(self) -> Message | None:
        header = 4 if self._untyped else 5
        if len(self._buffer) < header:
            return None
        kind = b"" if self._untyped else bytes(self._buffer[:1])
        (length,) = struct.unpack("!I", self._buffer[header - 4: header])
        if length < 4 or length > MAX_MESSAGE or (self._untyped and length < 8):
            raise ProtocolError(f"message {kind!r} claims length {length}: the stream is not framed as expected")
        total = length + (header - 4)
        if len(self._buffer) < total:
            return None
        message = Message(kind, bytes(self._buffer[:total]))
        del self._buffer[:total]
        if self._untyped and message.startup_code not in (SSL_REQUEST, GSSENC_REQUEST):
            self._untyped = False
        return message
