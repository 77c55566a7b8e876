"""The registry's wire format: magic byte 0, the schema id in 4 bytes big-endian, then the value unchanged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.wire_format import PREFIX_BYTES, schema_prefix, unframe

pytestmark = pytest.mark.unit


def test_the_prefix_is_the_magic_byte_and_the_id_big_endian() -> None:
    assert schema_prefix(1) == b"\x00\x00\x00\x00\x01"
    assert schema_prefix(0x01020304) == b"\x00\x01\x02\x03\x04"
    assert len(schema_prefix(7)) == PREFIX_BYTES


@given(st.integers(0, 2**31 - 1), st.binary())
def test_a_framed_value_unframes_to_its_id_and_the_same_bytes(schema_id: int, value: bytes) -> None:
    assert unframe(schema_prefix(schema_id) + value) == (schema_id, value)


@pytest.mark.parametrize("schema_id", [-1, 2**31])
def test_an_id_the_format_cannot_carry_is_refused(schema_id: int) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        schema_prefix(schema_id)


@pytest.mark.parametrize("value", [b"", b"\x00\x00\x01", b'{"total": 5}'])
def test_a_value_without_the_frame_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError, match="wire format"):
        unframe(value)
