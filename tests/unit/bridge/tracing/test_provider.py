"""The SDK set up from the OTEL_* variables when OTEL_TRACES_EXPORTER asks for spans, and the bridge's producer
made traced only then."""

from __future__ import annotations

import sys
from functools import partial

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from bridge.config import load_config
from bridge.daemon.assemble import _traced_publisher
from bridge.errors import ConfigurationError
from bridge.kafka.traced_publisher import TracedPublisher
from bridge.tracing.provider import _exporter, tracer_provider

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_PROTOCOL",
                 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)


def test_the_spans_come_from_outbox_bridge_with_the_bridge_name_unless_the_service_is_named() -> None:
    provider = tracer_provider(("console",), "orders")
    try:
        assert provider.resource.attributes["service.name"] == "outbox-bridge"
        assert provider.resource.attributes["outbox.bridge.name"] == "orders"
    finally:
        provider.shutdown()


def test_otel_service_name_names_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "orders-relay")
    provider = tracer_provider(("console",), "orders")
    try:
        assert provider.resource.attributes["service.name"] == "orders-relay"
    finally:
        provider.shutdown()


@pytest.mark.parametrize(("name", "protocol", "exporter"), [
    ("otlp", None, GrpcExporter),  # as OpenTelemetry's Python SDK reads it
    ("otlp", "grpc", GrpcExporter),
    ("otlp", "http/protobuf", HttpExporter),
    ("otlp_proto_http", None, HttpExporter),
    ("console", None, ConsoleSpanExporter),
])
def test_exporters_are_chosen_as_opentelemetry_names_them(monkeypatch: pytest.MonkeyPatch, name: str,
                                                          protocol: str | None, exporter: type) -> None:
    if protocol is not None:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    assert _exporter(name) is exporter


def test_an_unknown_exporter_or_protocol_is_refused_saying_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match=r"names 'zipkin', but no installed package provides"):
        tracer_provider(("zipkin",), "orders")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ConfigurationError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"):
        _exporter("otlp")


def test_without_the_sdk_tracing_is_refused_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with pytest.raises(ConfigurationError, match=r"pip install 'outbox-bridge\[tracing\]'"):
        tracer_provider(("otlp",), "orders")


def test_the_producer_is_traced_only_when_tracing_is_on() -> None:
    assert _traced_publisher(load_config(env={}), None, "") is None
    assert _traced_publisher(load_config(env={"OTEL_TRACES_EXPORTER": "none"}), None, "") is None
    traced = _traced_publisher(load_config(env={"OTEL_TRACES_EXPORTER": "console"}), None, "client")
    assert traced is not None
    factory, finish = traced
    assert isinstance(factory, partial) and factory.func is TracedPublisher
    finish()  # the provider made for it is shut down with the daemon


def test_a_given_provider_traces_and_is_only_flushed_at_exit() -> None:
    provider = TracerProvider()
    traced = _traced_publisher(load_config(env={}), provider, "client")
    assert traced is not None
    factory, finish = traced
    assert factory.func is TracedPublisher  # type: ignore[attr-defined]
    assert finish == provider.force_flush
