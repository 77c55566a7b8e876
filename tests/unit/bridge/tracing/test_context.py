"""The W3C trace context as outbox headers: what the writer records from the active span, and what the bridge
reads back from a record."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState, use_span

from bridge.tracing.context import active_trace_headers, format_traceparent, parse_traceparent

pytestmark = pytest.mark.unit


def test_the_active_spans_context_is_its_traceparent_and_tracestate() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("request") as span:
        context = span.get_span_context()
        headers = active_trace_headers()
    flags = int(context.trace_flags)  # sampled, and with level 2 of the format also "random"
    assert flags & 1
    assert headers == {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"}
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(0),
                         trace_state=TraceState([("vendor", "v1")]))
    with use_span(NonRecordingSpan(remote)):
        assert active_trace_headers() == {"traceparent": f"00-{0xABC:032x}-{0xDEF:016x}-00",
                                          "tracestate": "vendor=v1"}


def test_without_an_active_span_there_is_no_context() -> None:
    assert active_trace_headers() is None


def test_a_traceparent_round_trips() -> None:
    value = format_traceparent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1)
    assert value == b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    parsed = parse_traceparent(value)
    assert parsed is not None and parsed.sampled
    assert (parsed.trace_id, parsed.span_id, parsed.flags) == (0x0AF7651916CD43DD8448EB211C80319C,
                                                               0xB7AD6B7169203331, 1)


@pytest.mark.parametrize("value", [
    b"", b"garbage",
    b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # a later version: its layout is not known here
    b"00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id: invalid
    b"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id: invalid
    b"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case: not allowed
    b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
])
def test_anything_but_a_valid_version_00_traceparent_is_no_context(value: bytes) -> None:
    assert parse_traceparent(value) is None
