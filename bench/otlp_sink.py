"""An OTLP/HTTP trace receiver that accepts every export and counts its spans: the collector of B1-tracing.

It runs in the harness's process, so the bridge pays its whole side of exporting (building and sending the
protobuf requests) and nothing of a real collector's work lands on the bridge's cores beyond decoding the count.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OtlpSink:
    """`with OtlpSink() as sink:` listens on 127.0.0.1; `sink.endpoint` is the traces URL, `sink.spans` the count.
    With `keep=True` it also keeps each span, with the service that sent it, in `sink.kept` (for tests)."""

    def __init__(self, *, keep: bool = False) -> None:
        self.spans = 0
        self.requests = 0
        self.kept: list[tuple[str, Any]] = []
        self._keep = keep
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest.FromString(body)
                count = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
                with sink._lock:
                    sink.spans += count
                    sink.requests += 1
                    if sink._keep:
                        for resource in request.resource_spans:
                            service = {a.key: a.value.string_value for a in resource.resource.attributes}
                            sink.kept += [(service.get("service.name", ""), span)
                                          for scope in resource.scope_spans for span in scope.spans]
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-sink", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def take(self) -> int:
        """The spans received since the last call."""
        with self._lock:
            spans, self.spans = self.spans, 0
        return spans

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
