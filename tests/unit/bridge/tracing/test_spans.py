"""The bridge's publish span: a child of the writer's span, with the messaging attributes, carried by the record
in its `traceparent`, ended by the delivery report; and no span where the writer sampled none."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from confluent_kafka import KafkaError
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from bridge.core.records import KafkaRecord, OutboxRow, build_record
from bridge.tracing.context import parse_traceparent
from bridge.tracing.spans import PublishSpans

pytestmark = pytest.mark.unit

WRITER_TRACE = 0x0AF7651916CD43DD8448EB211C80319C
WRITER_SPAN = 0xB7AD6B7169203331


def _traceparent(flags: str = "01") -> str:
    return f"00-{WRITER_TRACE:032x}-{WRITER_SPAN:016x}-{flags}"


def _record(headers: str | None) -> KafkaRecord:
    row = OutboxRow(seq=7, event_id="ev-7", aggregate_type="order", aggregate_id="o-1", event_type="OrderPlaced",
                    payload="{}", headers=headers, occurred_at=datetime(2025, 1, 1, tzinfo=UTC), schema_version=1)
    return build_record(row, lambda aggregate_type: f"outbox.event.{aggregate_type}")


@pytest.fixture()
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


@pytest.fixture()
def spans(exported: InMemorySpanExporter) -> PublishSpans:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    return PublishSpans(provider.get_tracer("test"), client_id="outbox-bridge-orders")


def _one(exported: InMemorySpanExporter) -> ReadableSpan:
    [span] = exported.get_finished_spans()
    return span


def test_a_sampled_writer_context_gets_a_child_publish_span_that_the_record_carries(
    spans: PublishSpans, exported: InMemorySpanExporter
) -> None:
    record = _record(f'{{"traceparent": "{_traceparent()}", "tracestate": "vendor=v1", "tenant": "t"}}')
    started = spans.start(record)
    assert started is not None
    sent, span = started
    assert exported.get_finished_spans() == (), "open until the broker answers"
    spans.acknowledged(span, 2, 1041)

    finished = _one(exported)
    assert finished.name == "publish outbox.event.order" and finished.kind is SpanKind.PRODUCER
    assert finished.parent is not None and finished.parent.span_id == WRITER_SPAN and finished.parent.is_remote
    assert finished.context.trace_id == WRITER_TRACE
    assert dict(finished.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.operation.name": "publish",
        "messaging.operation.type": "send",
        "messaging.client.id": "outbox-bridge-orders",
        "messaging.destination.name": "outbox.event.order",
        "messaging.message.id": "ev-7",
        "messaging.kafka.message.key": "o-1",
        "outbox.seq": 7,
        "messaging.destination.partition.id": "2",
        "messaging.kafka.offset": 1041,
    }
    assert finished.context.trace_state.to_header() == "vendor=v1", "the writer's tracestate goes on"

    carried = parse_traceparent(dict(sent.headers)["traceparent"])
    assert carried is not None and carried.sampled
    assert (carried.trace_id, carried.span_id) == (WRITER_TRACE, finished.context.span_id)
    assert [name for name, _ in sent.headers] == [name for name, _ in record.headers], "only its value changes"
    assert dict(sent.headers)["tracestate"] == b"vendor=v1"
    assert sent.size == record.size
    assert dict(record.headers)["traceparent"] == _traceparent().encode(), "the built record is left as it was"


@pytest.mark.parametrize("headers", [None, '{"tenant": "t"}', f'{{"traceparent": "{_traceparent("00")}"}}',
                                     f'{{"traceparent": "{_traceparent("02")}"}}',  # random ids, not sampled
                                     '{"traceparent": "not a traceparent"}', '{"traceparent": ""}',
                                     '{"traceparent": "not a traceparent, flags 01"}'])
def test_a_row_without_a_sampled_context_is_sent_as_it_is_without_a_span(
    spans: PublishSpans, exported: InMemorySpanExporter, headers: str | None
) -> None:
    assert spans.start(_record(headers)) is None
    assert exported.get_finished_spans() == ()


def test_any_odd_flags_mean_sampled(spans: PublishSpans, exported: InMemorySpanExporter) -> None:
    started = spans.start(_record(f'{{"traceparent": "{_traceparent("03")}"}}'))  # sampled, random ids
    assert started is not None
    spans.acknowledged(started[1], 0, 0)
    assert _one(exported).parent.span_id == WRITER_SPAN  # type: ignore[union-attr]


def test_when_the_sdks_sampler_drops_the_span_the_record_keeps_the_writers_context(
    exported: InMemorySpanExporter
) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exported))
    assert PublishSpans(provider.get_tracer("test")).start(_record(f'{{"traceparent": "{_traceparent()}"}}')) is None
    assert exported.get_finished_spans() == ()


def test_a_failed_delivery_ends_the_span_as_an_error(spans: PublishSpans, exported: InMemorySpanExporter) -> None:
    started = spans.start(_record(f'{{"traceparent": "{_traceparent()}"}}'))
    assert started is not None
    spans.failed(started[1], KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out"))
    finished = _one(exported)
    assert finished.status.status_code is StatusCode.ERROR and "timed out" in (finished.status.description or "")
    assert (finished.attributes or {})["error.type"] == "_MSG_TIMED_OUT"
    assert "messaging.kafka.offset" not in (finished.attributes or {})
