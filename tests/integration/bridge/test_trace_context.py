"""A trace from the writer's transaction through the real bridge and broker to a plain consumer: the record carries
the bridge's publish span in `traceparent`, that span is a child of the writer's and is exported with the
messaging attributes of its acknowledged record, and a consumer that reads the header continues the trace; in both
deliveries (exactly-once: the consumer reads read_committed)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from sqlalchemy import create_engine

from bench.otlp_sink import OtlpSink
from bridge.migrate import upgrade
from bridge.tracing.context import parse_traceparent
from bridge.writer import OutboxEvent, append
from tests.support import bridge_config, read_topic, start_bridge, wait_until

pytestmark = pytest.mark.integration


def _event(n: int) -> OutboxEvent:
    return OutboxEvent(event_id=f"ev-{n}", aggregate_type="order", aggregate_id=f"o-{n % 2}",
                       event_type="OrderPlaced", payload={"n": n})


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_an_event_written_in_a_span_reaches_a_consumer_in_the_same_trace_through_the_bridges_span(
    delivery: str, sqlite_url: str, kafka_bootstrap: str
) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    upgrade(sqlite_url)
    engine = create_engine(sqlite_url)
    with provider.get_tracer("shop").start_as_current_span("POST /orders") as request, engine.begin() as conn:
        writer = request.get_span_context()
        append(conn, [_event(1), _event(2), _event(3)])
    with engine.begin() as conn:
        append(conn, [_event(4)])  # outside any span
    engine.dispose()

    config = bridge_config(sqlite_url, kafka_bootstrap, delivery=delivery)
    bridge = start_bridge(config, tracer_provider=provider)
    wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 4, 60,
               "4 events published")
    assert bridge.stop() == 0
    records = {dict(m.headers())["event_id"].decode(): m for m in read_topic(kafka_bootstrap,
                                                                             config.topic_for("order"))}
    assert sorted(records) == ["ev-1", "ev-2", "ev-3", "ev-4"]
    assert "traceparent" not in dict(records["ev-4"].headers()), "an event written outside a trace has none"

    publishes = {dict(span.attributes or {})["messaging.message.id"]: span for span in exported.get_finished_spans()
                 if span.kind is SpanKind.PRODUCER}
    assert sorted(publishes) == ["ev-1", "ev-2", "ev-3"], "one publish span per traced event, none for ev-4"
    for event_id, span in publishes.items():
        record: Any = records[event_id]
        headers = dict(record.headers())
        assert span.name == f"publish {record.topic()}"
        assert span.parent is not None and span.parent.span_id == writer.span_id, "a child of the writer's span"
        assert span.context.trace_id == writer.trace_id
        attributes = dict(span.attributes or {})
        assert attributes["messaging.system"] == "kafka"
        assert attributes["messaging.destination.name"] == record.topic()
        assert attributes["messaging.destination.partition.id"] == str(record.partition())
        assert attributes["messaging.kafka.offset"] == record.offset(), "ended once the broker acknowledged it"
        assert attributes["outbox.seq"] == int(headers["seq"])

        carried = parse_traceparent(headers["traceparent"])
        assert carried is not None and carried.trace_id == writer.trace_id, "the record carries the writer's trace"
        assert carried.span_id == span.context.span_id, "... continued from the bridge's publish span"

        # A plain consumer continues the trace from the header alone.
        parent = TraceContextTextMapPropagator().extract({"traceparent": headers["traceparent"].decode()})
        with provider.get_tracer("consumer").start_as_current_span("process", context=parent,
                                                                    kind=SpanKind.CONSUMER) as consumed:
            assert consumed.get_span_context().trace_id == writer.trace_id
        consumer_span = consumed.get_span_context().span_id
        [process] = [s for s in exported.get_finished_spans() if s.context.span_id == consumer_span]
        assert process.parent is not None and process.parent.span_id == span.context.span_id


def test_otel_traces_exporter_turns_the_spans_on_and_they_are_exported_over_otlp(
    sqlite_url: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upgrade(sqlite_url)
    engine = create_engine(sqlite_url)
    with TracerProvider().get_tracer("shop").start_as_current_span("POST /orders") as request, engine.begin() as conn:
        writer = request.get_span_context()
        append(conn, [_event(1)])
    engine.dispose()

    with OtlpSink(keep=True) as collector:
        # As an operator sets it: OTEL_TRACES_EXPORTER=otlp (the bridge's setting), the rest read by the SDK.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.endpoint)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        config = bridge_config(sqlite_url, kafka_bootstrap, traces_exporter="otlp")
        bridge = start_bridge(config)
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 1, 60,
                   "the event published")
        assert bridge.stop() == 0, "and its last spans exported as it stopped"
    [(service, span)] = collector.kept
    assert service == "outbox-bridge"
    assert span.name == f"publish {config.topic_for('order')}"
    assert span.trace_id == writer.trace_id.to_bytes(16, "big")
    assert span.parent_span_id == writer.span_id.to_bytes(8, "big")
