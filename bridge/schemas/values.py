"""From the plain record to the value a registry-aware consumer reads: the payload bytes as written, framed with
the schema id of the event's subject, once the payload has passed that JSON Schema.

The registry is asked once per (topic, event type), through a `SchemaLookup`; after that an event costs one
validation, of the payload's value as the record builder parsed it to check it is JSON (`record_and_payload`),
so it is not parsed twice. A subject without a usable schema is remembered for `retry_missing_s`, so under
`dead-letter` a burst of such events does not ask the registry once each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from bridge.core.records import KafkaRecord, OutboxRow
from bridge.core.wire_format import PREFIX_BYTES
from bridge.errors import PoisonEventError, SchemaMissingError


class RegisteredSchema(NamedTuple):
    """A subject's schema as the bridge uses it: its id, the 5 bytes in front of each value, and its check."""

    subject: str
    schema_id: int
    prefix: bytes
    #: None when a value is valid, else why not (the first, most relevant error).
    check: Callable[[Any], str | None]


class SchemaLookup(Protocol):
    """The schema of an event type on a topic: `SchemaMissingError` when there is none to use,
    `SchemaRegistryUnavailableError` when the registry cannot say now."""

    def __call__(self, topic: str, event_type: str) -> RegisteredSchema: ...


class SchemaValues:
    """Validates and frames each record's value; the poison gate calls it for every event in this format."""

    def __init__(self, lookup: SchemaLookup, retry_missing_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lookup = lookup
        self._retry_missing_s = retry_missing_s
        self._clock = clock
        self._known: dict[tuple[str, str], RegisteredSchema] = {}
        self._missing: dict[tuple[str, str], tuple[float, str]] = {}

    def framed(self, row: OutboxRow, plain: KafkaRecord, payload: Any) -> KafkaRecord:
        """`plain` with its value framed; PoisonEventError when the payload fails its schema or has none.

        `plain` and `payload`, the payload's value, are what `record_and_payload` gives; build them with a limit
        `PREFIX_BYTES` below the topic's, so the framed record still fits."""
        key = (plain.topic, row.event_type)
        schema = self._known.get(key)
        if schema is None:
            schema = self._find(row.seq, key)
        reason = schema.check(payload)
        if reason is not None:
            raise PoisonEventError(row.seq, f"payload fails the JSON Schema of subject {schema.subject} "
                                            f"(id {schema.schema_id}): {reason}")
        return plain._replace(value=schema.prefix + plain.value, size=plain.size + PREFIX_BYTES)

    def _find(self, seq: int, key: tuple[str, str]) -> RegisteredSchema:
        missing = self._missing.get(key)
        if missing is not None and self._clock() < missing[0]:
            raise PoisonEventError(seq, missing[1])
        try:
            schema = self._lookup(*key)
        except SchemaMissingError as exc:
            self._missing[key] = (self._clock() + self._retry_missing_s, str(exc))
            raise PoisonEventError(seq, str(exc)) from exc
        self._missing.pop(key, None)
        self._known[key] = schema
        return schema
