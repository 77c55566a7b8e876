"""The daemon's HTTP endpoint: Prometheus `/metrics`, `/healthz` (the process loop is alive) and
`/readyz` (leading or standing by, with a lease view)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def serve(
    host: str, port: int, registry: CollectorRegistry, ready: Callable[[], bool], status: Callable[[], dict[str, Any]]
) -> ThreadingHTTPServer:
    """Start the endpoint on a daemon thread and return the server (call `shutdown()` to stop it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif self.path.startswith("/healthz"):
                self._reply(200, b"ok\n", "text/plain")
            elif self.path.startswith("/readyz"):
                ok = ready()
                body = json.dumps({"ready": ok, **status()}, default=str).encode()
                self._reply(200 if ok else 503, body, "application/json")
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="bridge-http", daemon=True).start()
    return server
