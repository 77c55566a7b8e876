"""Trace context from the writer's transaction to the Kafka record, and the bridge's own publish spans.

- `context`: the W3C `traceparent`/`tracestate` headers: those of the span active where events are appended
  (`bridge.writer` records them), and reading one back from a record. Imports no OpenTelemetry.
- `spans`: a `publish` span per record whose row carries a sampled trace context, ended when the broker answers.
- `provider`: the OpenTelemetry SDK set up from the standard `OTEL_*` variables, when `OTEL_TRACES_EXPORTER`
  asks for the bridge's spans.

The SDK is an optional extra (`outbox-bridge[tracing]`): `spans` and `provider` are imported only when tracing is on.
"""
