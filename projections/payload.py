"""Payloads and the columns they give: the schema types a declaration names and the kinds build tables from.

Both `projections.declaration` and the kinds import this module; neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pyspark.sql.types import StructType

from projections.errors import DeclarationError

# A payload schema: a Spark StructType, or DDL such as "order_id STRING NOT NULL, amount DECIMAL(12,2)".
PayloadSchema = StructType | str

DEFAULT_KEY: Final = "aggregate_id"
#: The optional column a declaration turns on (`Projection.trace_id`): the trace id of the event that last changed
#: the row, from its record's W3C `traceparent` header, so a row can be traced back to the write.
TRACE_ID: Final = "trace_id"

# Columns the framework derives from the Kafka record and its headers; payload fields may not reuse them.
ENVELOPE_COLUMNS: Final = (
    "event_id",
    "event_type",
    "aggregate_type",
    "aggregate_id",
    "seq",
    "occurred_at",
    "payload",
    "headers",
    "topic",
    "partition",
    "offset",
)
# Columns the kinds add to their tables.
KIND_COLUMNS: Final = (
    "is_deleted",
    "deleted_seq",
    "field_seqs",
    "valid_from_seq",
    "valid_to_seq",
    "valid_from",
    "valid_to",
    "is_current",
    "window_start",
    "window_end",
    "count",
)
RESERVED_COLUMNS: Final = frozenset(ENVELOPE_COLUMNS) | frozenset(KIND_COLUMNS)


@dataclass(frozen=True)
class ResolvedPayload:
    """Payload schemas resolved to StructTypes, and the union of their fields as the projection's columns."""

    by_event_type: Mapping[str, StructType]
    columns: StructType

    def fields_of(self, event_type: str) -> tuple[str, ...]:
        """Names of the payload fields that events of this type declare."""
        return tuple(self.by_event_type[event_type].fieldNames())

    def required_fields(self, event_type: str) -> tuple[str, ...]:
        """Fields declared NOT NULL for this event type: an event lacking one goes to quarantine."""
        return tuple(f.name for f in self.by_event_type[event_type].fields if not f.nullable)


def as_struct(schema: PayloadSchema, what: str) -> StructType:
    """A StructType as declared, or parsed from DDL (which needs an active Spark session)."""
    if isinstance(schema, StructType):
        return schema
    try:
        parsed = StructType.fromDDL(schema)
    except Exception as exc:  # Spark raises several parse error types; all mean the same here
        raise DeclarationError(f"{what} is not valid DDL ({schema!r}): {exc}") from exc
    if not isinstance(parsed, StructType):
        raise DeclarationError(f"{what} must be a list of fields, got {parsed.simpleString()}")
    return parsed
