"""A subject's JSON Schema as the per-event check of `BRIDGE_VALUE_FORMAT=json-schema`: None for a valid value, else
why it is not.

`jsonschema` judges, and words every reason. It walks the schema anew for each value: 60 to 80 microseconds for
B1's four-field payloads here, which made json-schema values cost three times json ones (docs/BENCHMARKS.md,
value formats). So a schema fastjsonschema can compile is first checked by the code it generates (about 4
microseconds), and a value it passes is valid; only a value it fails goes to `jsonschema`, whose verdict and
reason stand (a value `jsonschema` accepts is accepted, whatever the compiled check said).

Compiled only when the answers cannot differ in kind: the schema names draft 4, 6 or 7 in `$schema` (without it,
`jsonschema` takes the newest draft, which fastjsonschema does not know), refers only inside itself (fastjsonschema
would fetch a remote `$ref` over the network), and gives no `default` (fastjsonschema writes defaults into the
value it checks); formats are not asserted, as `jsonschema` does not assert them without a format checker.
Imported only when the format is on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from jsonschema import exceptions as schema_errors
from jsonschema import validators

from bridge.errors import SchemaMissingError

Check = Callable[[Any], "str | None"]

#: The `$schema` URIs of the drafts fastjsonschema compiles (without the optional trailing "#").
COMPILED_DRAFTS = frozenset(
    f"{scheme}://json-schema.org/draft-{number}/schema" for scheme in ("http", "https") for number in ("04", "06", "07")
)


def schema_check(subject: str, schema_id: int, schema: Any) -> Check:
    """The check of one subject's schema (a parsed JSON value); SchemaMissingError when it is no valid JSON Schema."""
    try:
        validator_class = validators.validator_for(schema)
        validator_class.check_schema(schema)
    except (ValueError, schema_errors.SchemaError) as exc:
        raise SchemaMissingError(f"the schema of subject {subject} (id {schema_id}) is not a valid JSON Schema: "
                                 f"{exc}") from exc
    validator = validator_class(schema)

    def judged(value: Any) -> str | None:
        error = schema_errors.best_match(validator.iter_errors(value))
        return None if error is None else f"{error.message} at {error.json_path}"

    compiled = _compiled(schema)
    if compiled is None:
        return judged
    fast, failed = compiled

    def check(value: Any) -> str | None:
        try:
            fast(value)
        except failed:
            return judged(value)
        return None

    return check


def _compiled(schema: Any) -> tuple[Callable[[Any], Any], type[Exception]] | None:
    """fastjsonschema's check of `schema` and the error it raises for an invalid value, when it may be used."""
    if not isinstance(schema, dict) or str(schema.get("$schema", "")).rstrip("#") not in COMPILED_DRAFTS:
        return None
    for key, value in _keywords(schema):
        if key == "default" or (key == "$ref" and not str(value).startswith("#")):
            return None
    try:
        import fastjsonschema
    except ImportError:  # an older install of the extra: every value is judged by jsonschema alone
        return None
    try:
        return fastjsonschema.compile(schema, use_formats=False), fastjsonschema.JsonSchemaValueException
    except Exception:  # noqa: BLE001 - whatever it cannot compile, jsonschema checks alone
        return None


def _keywords(node: Any) -> Iterator[tuple[str, Any]]:
    """Every key of every object in a schema, with its value (a property named like a keyword included)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _keywords(value)
    elif isinstance(node, list):
        for item in node:
            yield from _keywords(item)
