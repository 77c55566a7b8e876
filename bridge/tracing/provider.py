"""The OpenTelemetry SDK for the bridge's publish spans, set up from the standard `OTEL_*` variables.

`OTEL_TRACES_EXPORTER` (the bridge's `traces_exporter` setting) names the exporters, as in every OpenTelemetry
SDK: `otlp` (OTLP over gRPC, or over HTTP with `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`, as in OpenTelemetry's
Python SDK), `otlp_proto_http`, `otlp_proto_grpc`, `console`, or any exporter an installed package registers. The
SDK reads the rest itself: the endpoint and headers (`OTEL_EXPORTER_OTLP_*`), the sampler (`OTEL_TRACES_SAMPLER`),
the batch processor's pace (`OTEL_BSP_*`), the resource (`OTEL_SERVICE_NAME`, default `outbox-bridge`, and
`OTEL_RESOURCE_ATTRIBUTES`) and `OTEL_SDK_DISABLED`. The provider is the bridge's own, not the global one.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Final

from bridge.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

SERVICE_NAME: Final = "outbox-bridge"
_EXPORTERS: Final = "opentelemetry_traces_exporter"  # the entry point group OpenTelemetry's exporters register in
_BY_PROTOCOL: Final = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
_INSTALL: Final = "install the bridge with its tracing extra: pip install 'outbox-bridge[tracing]'"


def tracer_provider(exporters: tuple[str, ...], bridge_name: str) -> TracerProvider:
    """A provider exporting through each of `exporters` in batches; ConfigurationError naming what to install
    or set when the SDK or an exporter is missing."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER={','.join(exporters)} asks for the bridge's publish spans, but the OpenTelemetry "
            f"SDK is not installed; {_INSTALL}, or unset OTEL_TRACES_EXPORTER"
        ) from None
    classes = [_exporter(name) for name in exporters]  # every name checked before anything starts
    resource = Resource.create({"outbox.bridge.name": bridge_name})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for exporter in classes:
        provider.add_span_processor(BatchSpanProcessor(exporter()))
    return provider


def _exporter(name: str) -> Any:
    """The exporter class `name` stands for."""
    entry = name
    if name == "otlp":
        variable = next((name for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
                         if os.environ.get(name)), None)
        protocol = os.environ[variable].strip() if variable else "grpc"
        if protocol not in _BY_PROTOCOL:
            raise ConfigurationError(
                f"{variable}={protocol} is not an OTLP protocol the bridge knows; use {' or '.join(_BY_PROTOCOL)}"
            )
        entry = _BY_PROTOCOL[protocol]
    found = list(entry_points(group=_EXPORTERS, name=entry))
    if not found:
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER names {name!r}, but no installed package provides that exporter "
            f"({entry!r} in the {_EXPORTERS} entry points); {_INSTALL}, or name another exporter"
        )
    return found[0].load()
