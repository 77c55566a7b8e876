"""A projection, declared once: where its events come from, how payloads map to columns, and its kind.

Everything that can be checked without Spark is checked when the `Projection` is built; what needs
Spark (payload schemas given as DDL strings) is checked by `Projection.resolve()`, which the runner
calls before starting the stream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from pyspark.sql.types import StructField, StructType

from projections.errors import DeclarationError
from projections.kind import Kind
from projections.payload import DEFAULT_KEY, RESERVED_COLUMNS, TRACE_ID, PayloadSchema, ResolvedPayload, as_struct

# Kafka source options the runner owns: a declaration may not change where reading starts or how loss
# is handled.
MANAGED_SOURCE_OPTIONS: Final = frozenset(
    {
        "kafka.bootstrap.servers",
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "failOnDataLoss",
        "includeHeaders",
        "maxOffsetsPerTrigger",
        "kafka.group.id",
        "groupIdPrefix",
    }
)

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True, eq=False)
class Projection:
    """A projection: its name, its source (topics, a pattern or aggregate types), its event types and kind.

    `event_types` maps each handled event type to its payload schema; an empty mapping handles every event
    type without parsing payloads. `key` is the table's key column: `aggregate_id` (the Kafka key) or a
    payload field every handled event type declares. `options` are extra Kafka source options (`kafka.*`,
    `minPartitions`). `trace_id` adds the column `trace_id`: the trace id in the `traceparent` header of the event
    that last changed the row (null for an event written outside a trace), for the kinds whose rows each come
    from one event (`latest_state`, `history`, `event_log`).
    """

    name: str
    kind: Kind
    event_types: Mapping[str, PayloadSchema] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    aggregate_types: tuple[str, ...] = ()
    key: str = DEFAULT_KEY
    options: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    trace_id: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "event_types", MappingProxyType(dict(self.event_types)))
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "aggregate_types", tuple(self.aggregate_types))
        if not _NAME.match(self.name):
            raise DeclarationError(
                f"projection name {self.name!r} must be lower-case letters, digits and underscores, "
                "starting with a letter (it names the table directory, the checkpoint and the metrics label)"
            )
        sources = sum(bool(s) for s in (self.topics, self.topic_pattern, self.aggregate_types))
        if sources != 1:
            raise DeclarationError(
                f"projection {self.name}: give exactly one of topics, topic_pattern or aggregate_types "
                f"(got {sources})"
            )
        managed = sorted(set(self.options) & MANAGED_SOURCE_OPTIONS)
        if managed:
            raise DeclarationError(
                f"projection {self.name}: options {managed} are set by the runner (flags and settings), "
                "not by the declaration"
            )
        if self.key != DEFAULT_KEY:
            lacking = [
                t
                for t, s in self.event_types.items()
                if isinstance(s, StructType) and self.key not in s.names
            ]
            if not self.event_types or lacking:
                raise DeclarationError(
                    f"projection {self.name}: key field {self.key!r} must be declared by every event type "
                    f"(missing in {lacking or 'an undeclared payload'}); or use the default key aggregate_id"
                )
        if self.trace_id and not self.kind.keeps_trace_id:
            raise DeclarationError(
                f"projection {self.name}: trace_id is kept only by kinds whose rows each come from one event "
                f"(latest_state, history, event_log), not by {self.kind.name}"
            )
        self.kind.validate(self)

    @property
    def handles_every_type(self) -> bool:
        """True when the projection declares no event types and so takes every event on its topics."""
        return not self.event_types

    def source_option(self, topic_template: str) -> tuple[str, str]:
        """The Kafka source's subscription option: ("subscribe", "a,b") or ("subscribePattern", regex)."""
        if self.topic_pattern:
            return "subscribePattern", self.topic_pattern
        if self.topics:
            return "subscribe", ",".join(self.topics)
        if "{aggregate_type}" not in topic_template:
            raise DeclarationError(
                f"topic template {topic_template!r} (BRIDGE_TOPIC_TEMPLATE) has no {{aggregate_type}} "
                "placeholder"
            )
        return "subscribe", ",".join(
            topic_template.replace("{aggregate_type}", a) for a in self.aggregate_types
        )

    def resolve(self) -> ResolvedPayload:
        """Resolve the payload schemas (DDL needs an active Spark session) and check the columns they give."""
        by_type = {
            t: as_struct(s, f"projection {self.name}: payload schema of {t}")
            for t, s in self.event_types.items()
        }
        columns: dict[str, StructField] = {}
        for event_type, schema in by_type.items():
            for f in schema.fields:
                if f.name in RESERVED_COLUMNS or f.name.startswith("_") or (self.trace_id and f.name == TRACE_ID):
                    raise DeclarationError(
                        f"projection {self.name}: payload field {f.name!r} of {event_type} collides with "
                        f"a column the framework adds ({', '.join(sorted(RESERVED_COLUMNS))}, "
                        f"{TRACE_ID} when kept, or a leading underscore)"
                    )
                seen = columns.get(f.name)
                if seen is not None and seen.dataType != f.dataType:
                    raise DeclarationError(
                        f"projection {self.name}: payload field {f.name!r} is "
                        f"{seen.dataType.simpleString()} in one event type and "
                        f"{f.dataType.simpleString()} in {event_type}; declare one type"
                    )
                columns.setdefault(f.name, StructField(f.name, f.dataType, True))
        if self.key != DEFAULT_KEY:
            lacking = [t for t, s in by_type.items() if self.key not in s.names]
            if lacking:
                raise DeclarationError(
                    f"projection {self.name}: key field {self.key!r} is not declared by {', '.join(lacking)}"
                )
        return ResolvedPayload(MappingProxyType(by_type), StructType(list(columns.values())))

