"""The per-event JSON Schema check: the compiled first check never changes a verdict or a reason of `jsonschema`'s,
and it is used only for the schemas where the two can agree."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import exceptions as schema_errors
from jsonschema import validators

from bridge.errors import SchemaMissingError
from bridge.schemas.checks import _compiled, schema_check

DRAFT7 = "http://json-schema.org/draft-07/schema#"

ORDER = {
    "$schema": DRAFT7, "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^order-[0-9]+$"},
        "n": {"type": "integer", "minimum": 0},
        "amount": {"type": "number", "exclusiveMaximum": 1000},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": True},
        "kind": {"enum": ["placed", "paid", None]},
        "note": {"type": ["string", "null"], "maxLength": 5},
        "at": {"type": "string", "format": "date-time"},
    },
    "required": ["order_id", "n"],
    "additionalProperties": False,
}
CHOICES = {
    "$schema": "http://json-schema.org/draft-04/schema", "definitions": {"id": {"type": "integer", "minimum": 1}},
    "anyOf": [{"type": "object", "properties": {"id": {"$ref": "#/definitions/id"}}, "required": ["id"]},
              {"type": "array", "minItems": 2}],
    "not": {"type": "object", "required": ["forbidden"]},
}
SCHEMAS = [ORDER, CHOICES]

KEYS = st.sampled_from(["order_id", "n", "amount", "tags", "kind", "note", "at", "id", "forbidden", "extra"])
SCALARS = (st.none() | st.booleans() | st.integers(-3, 3000) | st.floats(-10, 2000, allow_nan=False)
           | st.sampled_from(["order-1", "order-x", "placed", "paid", "2026-11-28T04:00:00Z", "not a time", "abcdef"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=6),
                      max_leaves=12)


def judged(schema: dict[str, Any], value: Any) -> str | None:
    """What jsonschema alone says."""
    error = schema_errors.best_match(validators.validator_for(schema)(schema).iter_errors(value))
    return None if error is None else f"{error.message} at {error.json_path}"


@pytest.mark.parametrize("schema", SCHEMAS, ids=["order", "choices"])
def test_the_schemas_here_are_compiled(schema: dict[str, Any]) -> None:
    assert _compiled(schema) is not None


@settings(max_examples=400, deadline=None)
@given(value=VALUES, which=st.sampled_from(range(len(SCHEMAS))))
def test_every_verdict_and_reason_is_jsonschemas(value: Any, which: int) -> None:
    schema = SCHEMAS[which]
    assert schema_check("s", 1, schema)(value) == judged(schema, value)


def test_a_value_of_the_schemas_shape_passes_and_each_fault_is_named() -> None:
    check = schema_check("s", 1, ORDER)
    assert check({"order_id": "order-7", "n": 7, "tags": ["a"], "kind": None, "at": "not a time"}) is None
    assert check({"order_id": "order-7", "n": True}) == "True is not of type 'integer' at $.n"
    assert check({"order_id": "order-7", "n": 1, "x": 1}) == judged(ORDER, {"order_id": "order-7", "n": 1, "x": 1})


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "object"}, "no $schema: jsonschema takes the newest draft"),
    ({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}, "a draft it does not know"),
    ({"$schema": DRAFT7, "$ref": "http://example.com/order.json"}, "a remote $ref it would fetch"),
    ({"$schema": DRAFT7, "properties": {"n": {"type": "integer", "default": 0}}}, "a default it would write in"),
])
def test_schemas_the_two_could_answer_differently_are_left_to_jsonschema(schema: dict[str, Any], why: str) -> None:
    assert _compiled(schema) is None, why


def test_a_default_is_not_written_into_the_value() -> None:
    schema = {"$schema": DRAFT7, "type": "object", "properties": {"n": {"type": "integer", "default": 0}}}
    value: dict[str, Any] = {}
    assert schema_check("s", 1, schema)(value) is None
    assert value == {}


def test_a_schema_that_is_not_one_is_refused_naming_the_subject() -> None:
    with pytest.raises(SchemaMissingError, match=r"subject s \(id 3\) is not a valid JSON Schema"):
        schema_check("s", 3, {"$schema": DRAFT7, "type": "no such type"})
