"""The bridge's `publish` span for each record whose row carries a sampled trace context.

The span's parent is the writer's span (the row's `traceparent`); it starts as the record is handed to the
producer and ends when the broker answers, with the partition and offset of an acknowledged record or the error
of a failed one (OpenTelemetry's messaging conventions). The record then carries the span's own `traceparent`,
so a consumer continues the trace from the bridge's span.

Sampling follows the writer's: a row without a trace context, or with one its writer did not sample, is sent as
it is, without a span, for the cost of a look at its headers. A span costs tens of microseconds, several times
what the bridge spends on an event otherwise, so tracing every event of a backlog would slow the bridge
severalfold; the writer's sampler already says which events are worth it. The SDK's own sampler
(`OTEL_TRACES_SAMPLER`) still applies to the spans started here: when it drops one, the record keeps the writer's
`traceparent`, so a consumer's span joins the writer's directly.
"""

from __future__ import annotations

from typing import Final

from confluent_kafka import KafkaError
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TraceState,
    set_span_in_context,
)

from bridge.core.records import KafkaRecord
from bridge.tracing.context import TRACEPARENT, TRACESTATE, format_traceparent, parse_traceparent

#: Every record starts with the five headers of the design's format (`build_record`); a row's own come after them.
_FIXED_HEADERS: Final = 5
_ODD: Final = frozenset(b"13579bdf")  # as byte values
#: The attributes of the messaging semantic conventions every publish span has.
_MESSAGING: Final = {
    "messaging.system": "kafka",
    "messaging.operation.name": "publish",
    "messaging.operation.type": "send",  # the conventions' name, since 1.26, for what they called publish
}


class PublishSpans:
    """Starts and ends the publish spans of one bridge; one per process, shared by its producers."""

    def __init__(self, tracer: Tracer, client_id: str = "") -> None:
        self._tracer = tracer
        self._fixed: dict[str, str] = dict(_MESSAGING)
        if client_id:
            self._fixed["messaging.client.id"] = client_id

    def start(self, record: KafkaRecord) -> tuple[KafkaRecord, Span] | None:
        """The record to send instead, carrying the new span's `traceparent`, and the span; None when the
        record is sent as it is (its row has no sampled trace context, or the SDK's sampler dropped the span)."""
        headers = record.headers
        at = -1
        state = b""
        for index in range(_FIXED_HEADERS, len(headers)):  # the row's own headers follow the record's fixed ones
            name = headers[index][0]
            if name == TRACEPARENT:
                at = index
            elif name == TRACESTATE:
                state = headers[index][1]
        if at < 0:
            return None
        value = headers[at][1]
        # The flags' last hex digit is odd when the writer sampled: an unsampled context is not even parsed.
        if not value or value[-1] not in _ODD:
            return None
        writer = parse_traceparent(value)
        if writer is None:
            return None
        parent = SpanContext(writer.trace_id, writer.span_id, is_remote=True, trace_flags=TraceFlags(writer.flags),
                             trace_state=TraceState.from_header([state.decode(errors="replace")]) if state else None)
        event_id = headers[0][1].decode(errors="replace") if headers and headers[0][0] == "event_id" else ""
        span = self._tracer.start_span(
            f"publish {record.topic}",
            context=set_span_in_context(NonRecordingSpan(parent)),
            kind=SpanKind.PRODUCER,
            attributes={
                **self._fixed,
                "messaging.destination.name": record.topic,
                "messaging.message.id": event_id,
                "messaging.kafka.message.key": record.key.decode(errors="replace"),
                "outbox.seq": record.seq,
            },
        )
        own = span.get_span_context()
        if not own.is_valid or not own.trace_flags.sampled:
            return None  # nothing is recorded for it, so the consumer had better join the writer's span
        traced = list(headers)
        traced[at] = (TRACEPARENT, format_traceparent(own.trace_id, own.span_id, own.trace_flags))
        # The same length as the row's traceparent: the size the gate checked still holds.
        return record._replace(headers=traced), span

    @staticmethod
    def acknowledged(span: Span, partition: int, offset: int) -> None:
        """The broker appended the record at `offset` of `partition`."""
        span.set_attributes({"messaging.destination.partition.id": str(partition), "messaging.kafka.offset": offset})
        span.end()

    @staticmethod
    def failed(span: Span, error: KafkaError) -> None:
        """The delivery failed: the bridge sends the record again from its watermark, in a span of its own."""
        span.set_attribute("error.type", error.name())
        span.set_status(Status(StatusCode.ERROR, error.str()))
        span.end()

    @staticmethod
    def abandoned(span: Span, why: str) -> None:
        """No delivery report will come (the producer was closed, or the record sent again first)."""
        span.set_attribute("error.type", "abandoned")
        span.set_status(Status(StatusCode.ERROR, why))
        span.end()
