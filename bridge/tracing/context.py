"""The W3C trace context (https://www.w3.org/TR/trace-context/) as outbox headers.

A row's `traceparent` and `tracestate` headers travel to its Kafka record like any other row header, so a trace
runs from the transaction that wrote the event to whoever consumes it. Any writer can set them; `bridge.writer`
sets them from the active OpenTelemetry span.
"""

from __future__ import annotations

import re
import sys
from typing import Final, NamedTuple

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"

# Version 00: the only one whose layout is known; a later version is read as "no context" rather than guessed at.
_TRACEPARENT: Final = re.compile(rb"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_SAMPLED: Final = 0x01


class TraceParent(NamedTuple):
    """A valid `traceparent`: the trace, the parent span in it and the trace flags."""

    trace_id: int
    span_id: int
    flags: int

    @property
    def sampled(self) -> bool:
        """Whether the writer's sampler kept the trace (its spans are exported)."""
        return bool(self.flags & _SAMPLED)


def active_trace_headers() -> dict[str, str] | None:
    """`traceparent`, and `tracestate` when there is one, of the span active here; None when none is.

    Imports OpenTelemetry only where the process already has: a span can be active only in a process that
    imported `opentelemetry.trace`, so elsewhere this costs a dictionary lookup and imports nothing."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)  # nothing without a valid span context
    return carrier or None


def parse_traceparent(value: bytes) -> TraceParent | None:
    """A version-00 `traceparent` header's ids and flags; None for anything else, or an all-zero id (invalid)."""
    found = _TRACEPARENT.fullmatch(value)
    if found is None:
        return None
    trace_id, span_id = int(found.group(1), 16), int(found.group(2), 16)
    if not trace_id or not span_id:
        return None
    return TraceParent(trace_id, span_id, int(found.group(3), 16))


def format_traceparent(trace_id: int, span_id: int, flags: int) -> bytes:
    """The version-00 `traceparent` of a span."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}".encode()
