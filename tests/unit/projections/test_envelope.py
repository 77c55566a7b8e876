"""The envelope's reading of a record's value: a value in the schema registry's wire format gives the payload
without its frame, a plain JSON value gives itself. The expression is standard SQL, evaluated here by SQLite on
the same bytes (binary `length`, `substring` and an `X'..'` literal mean the same there); Spark's reading of both
formats is in tests/integration/projections/test_record_formats.py."""

from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.core.wire_format import MAGIC_BYTE, schema_prefix
from projections.envelope import unframed_sql

pytestmark = pytest.mark.unit

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3),
    max_leaves=8,
)


def _payload(value: bytes | None) -> bytes | None:
    with sqlite3.connect(":memory:") as db:
        db.execute("CREATE TABLE records (value BLOB)")
        db.execute("INSERT INTO records VALUES (?)", (value,))
        (payload,) = db.execute(f"SELECT {unframed_sql('value')} FROM records").fetchone()
    db.close()
    return payload


@pytest.mark.parametrize("schema_id", [0, 7, 2**31 - 1])
def test_a_framed_value_gives_the_payload_as_written(schema_id: int) -> None:
    written = '{ "order_id" : "o-1", "note": "café" }'.encode()
    assert _payload(schema_prefix(schema_id) + written) == written


@pytest.mark.parametrize("value", [b'{"order_id": "o-1"}', b"[1, 2]", b" {}", b'"text"', b"", None])
def test_a_plain_value_gives_itself(value: bytes | None) -> None:
    assert _payload(value) == value


def test_a_value_too_short_for_a_frame_is_left_as_it_is_for_quarantine_to_name() -> None:
    assert _payload(b"\x00\x00\x01") == b"\x00\x00\x01"


@given(JSON, st.sampled_from([None, 2]), st.booleans())
def test_no_json_text_starts_with_the_magic_byte(document: object, indent: int | None, ascii_only: bool) -> None:
    """What lets the first byte tell the formats apart: JSON text starts with a value or whitespace, never NUL."""
    text = json.dumps(document, indent=indent, ensure_ascii=ascii_only).encode()
    assert text[0] != MAGIC_BYTE
    assert _payload(text) == text
