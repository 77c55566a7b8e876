"""One JSON verdict: a payload or headers text the writer accepts is one the bridge publishes, and a text
the writer refuses is one the bridge treats as poison (a row written by plain SQL is judged the same way)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bridge.core.records import OutboxRow, build_record
from bridge.errors import InvalidEventError, PoisonEventError
from bridge.writer import OutboxEvent

pytestmark = pytest.mark.unit

#: Texts `json` and orjson judge differently, and texts near those edges.
EDGE_CASES = [
    "1e400", "-1e400", "1E400", "[1.5e308, 1.8e308]", "1e-400", "1" * 400, "1" * 5000,
    '{"a": "\\ud800"}', '"\\udc00\\ud800"', '"\\ud83d\\ude00"', '"\\u0000"',
    "NaN", "Infinity", "-Infinity", '{"a": NaN}',
    "[" * 1024 + "]" * 1024, "[" * 1025 + "]" * 1025, "[" * 5000 + "]" * 5000,
    "\ufeff{}", " {} ", '{"a": 1, "a": 2}', "18446744073709551616", '"\x01"', "", "null", "[1,]",
]


def _row(payload: str, headers: str | None = None) -> OutboxRow:
    return OutboxRow(7, "ev-7", "order", "o-1", "Placed", payload, headers, datetime(2025, 1, 1, tzinfo=UTC), 1)


def _route(aggregate_type: str) -> str:
    return f"outbox.event.{aggregate_type}"


def _writer_accepts(payload: Any = "{}", headers: dict[str, str] | None = None) -> bool:
    try:
        OutboxEvent(aggregate_type="order", aggregate_id="o-1", event_type="Placed", payload=payload, headers=headers)
    except InvalidEventError:
        return False
    return True


def _bridge_publishes(payload: str, headers: str | None = None) -> bool:
    try:
        build_record(_row(payload, headers), _route)
    except PoisonEventError:
        return False
    return True


@pytest.mark.parametrize("text", EDGE_CASES, ids=lambda text: repr(text[:24]))
def test_the_writer_accepts_a_payload_text_exactly_when_the_bridge_publishes_it(text: str) -> None:
    assert _writer_accepts(text) == _bridge_publishes(text)


def test_numbers_past_a_double_lone_surrogates_and_deep_nesting_are_refused_on_both_sides() -> None:
    for text in ("1e400", '{"a": "\\ud800"}', "[" * 5000 + "]" * 5000, "1" * 5000, "NaN"):
        assert not _writer_accepts(text), text
        assert not _bridge_publishes(text), text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40) | json_values.map(json.dumps) | json_values.map(
    lambda value: json.dumps(value, ensure_ascii=False)))
@example(text="1e400")
@example(text='["\\udfff"]')
def test_any_text_is_accepted_by_the_writer_exactly_when_the_bridge_publishes_it(text: str) -> None:
    if not _row_can_hold(text):
        return  # not storable in any outbox column, so no row can carry it
    assert _writer_accepts(text) == _bridge_publishes(text)


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_a_dict_payload_the_writer_serializes_is_published(value: Any) -> None:
    event_payload = {"v": value}
    if _writer_accepts(event_payload):
        serialized = OutboxEvent(aggregate_type="order", aggregate_id="o-1", event_type="Placed",
                                 payload=event_payload).payload
        assert _bridge_publishes(serialized)


@settings(max_examples=200, deadline=None)
@given(headers=st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda name: name not in {
    "event_id", "event_type", "aggregate_type", "seq", "occurred_at"}), st.text(max_size=8), max_size=4))
def test_headers_the_writer_accepts_are_published_and_the_rest_refused(headers: dict[str, str]) -> None:
    text = json.dumps(headers, separators=(",", ":"), ensure_ascii=False)
    if not _row_can_hold(text):
        assert not _writer_accepts(headers=headers)
        return
    assert _writer_accepts(headers=headers) == _bridge_publishes("{}", text)


def _row_can_hold(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
