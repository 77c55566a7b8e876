"""A Kafka Connect worker's REST API: connectors created, watched, paused, stopped, resumed and deleted.

`ConnectWorker` (`stack.connect`) runs the worker process and takes these calls from `ConnectApi`; what they
need of it is where it answers (`url`) and which log to point at when a connector fails (`log_file`).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stack.processes import StackError


class ConnectError(StackError):
    """The worker or a connector could not be set up; the message says which log to read."""


class ConnectApi:
    """The calls of the worker's REST API that tests and benchmarks make; a worker supplies `url` and `log_file`."""

    @property
    def url(self) -> str:
        raise NotImplementedError

    @property
    def log_file(self) -> Path:
        raise NotImplementedError

    def request(self, method: str, path: str, body: object = None, timeout: float = 30.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ConnectError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectError(f"{method} {path}: {exc}") from None
        return json.loads(text) if text else None

    def put_connector(self, name: str, config: Mapping[str, str]) -> None:
        self.request("PUT", f"/connectors/{name}/config", dict(config))

    def connector_status(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/connectors/{name}/status")  # type: ignore[no-any-return]

    def wait_state(self, name: str, state: str, timeout: float = 60.0) -> None:
        """Wait until the connector and all its tasks are in `state` (RUNNING, PAUSED, STOPPED); fail on FAILED."""
        deadline = time.monotonic() + timeout
        seen: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                seen = self.connector_status(name)
            except ConnectError:
                time.sleep(0.2)
                continue
            tasks = seen.get("tasks", [])
            failed = [t for t in tasks if t.get("state") == "FAILED"]
            if seen.get("connector", {}).get("state") == "FAILED" or failed:
                trace = (failed[0] if failed else seen["connector"]).get("trace", "")
                raise ConnectError(f"connector {name} failed:\n{trace[:4000]}")
            wanted_tasks = state != "STOPPED"  # a stopped connector has no tasks
            if seen.get("connector", {}).get("state") == state and (
                    not wanted_tasks or (tasks and all(t.get("state") == state for t in tasks))):
                return
            time.sleep(0.2)
        raise ConnectError(f"connector {name} not {state} within {timeout:.0f}s: {seen}; see {self.log_file}")

    def pause(self, name: str) -> None:
        self.request("PUT", f"/connectors/{name}/pause")

    def stop_connector(self, name: str) -> None:
        """Stop the connector's tasks (KIP-875) and keep its config and offsets; `resume` starts them again."""
        self.request("PUT", f"/connectors/{name}/stop")

    def resume(self, name: str) -> None:
        self.request("PUT", f"/connectors/{name}/resume")

    def delete_connector(self, name: str) -> None:
        try:
            self.request("DELETE", f"/connectors/{name}")
        except ConnectError as exc:
            if "HTTP 404" not in str(exc):
                raise
