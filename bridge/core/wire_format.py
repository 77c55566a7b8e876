"""The schema registry's wire format (Confluent's, which Apicurio's `ccompat` API and every Confluent
deserializer also read): a magic byte 0, the schema id as 4 bytes big-endian, then the serialized value.

For JSON Schema the value after the 5 bytes is the JSON text itself, so the bridge frames the payload bytes
as written: a consumer that strips the prefix reads exactly what the writer stored. Pure.
"""

from __future__ import annotations

from typing import Final

MAGIC_BYTE: Final = 0
#: The bytes the frame adds in front of the value.
PREFIX_BYTES: Final = 5
_LARGEST_ID: Final = 2**31 - 1  # Java's int: the registries' ids are signed 32-bit


def schema_prefix(schema_id: int) -> bytes:
    """The 5 bytes every value framed with `schema_id` starts with; ValueError for an id the format cannot carry."""
    if not 0 <= schema_id <= _LARGEST_ID:
        raise ValueError(f"schema id {schema_id} does not fit the wire format's 4 signed bytes")
    return bytes((MAGIC_BYTE,)) + schema_id.to_bytes(4, "big")


def unframe(value: bytes) -> tuple[int, bytes]:
    """The schema id and the serialized value of a framed record value; ValueError when it is not framed."""
    if len(value) < PREFIX_BYTES or value[0] != MAGIC_BYTE:
        raise ValueError("not in the schema registry's wire format (no magic byte 0 and 4-byte schema id)")
    return int.from_bytes(value[1:PREFIX_BYTES], "big"), value[PREFIX_BYTES:]
