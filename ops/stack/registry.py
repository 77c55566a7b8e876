"""A schema registry without Docker, for the bridge's json-schema value format: Apicurio Registry as a local
process on loopback, in-memory storage (its subjects are gone when it stops).

Confluent's registry is not on Maven Central and Karapace is not on PyPI; Apicurio's Quarkus build is on Maven
Central and serves Confluent's REST API at `/apis/ccompat/v7`, which confluent-kafka's registry client (the
bridge's) and Confluent's serdes speak. 2.6 is the line that runs on Java 17. It is unpacked by
ops/maven/schema-registry into `.cache/jars/schema-registry`; its data, log and pid file are under
`.run/schema-registry/`. About 20 s to start and 200 MB resident.

    python ops/localstack.py registry-up [--port 28081]
    python ops/localstack.py registry-down
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from stack.jars import ensure_jars
from stack.places import HOST, REGISTRY_PORT
from stack.processes import OwnedProcess, StackError, log, pid_alive, port_open, read_pid, stop_pid

VERSION = "2.6.13.Final"
RUNNER = f"apicurio-registry-app-{VERSION}-runner.jar"
HEAP = "-Xmx256m"
#: Confluent's API, where the bridge's `BRIDGE_SCHEMA_REGISTRY_URL` points.
CCOMPAT_PATH = "/apis/ccompat/v7"


@dataclass(frozen=True)
class SchemaRegistry(OwnedProcess):
    """One Apicurio Registry process on a loopback port."""

    PID_FILE_NAME = "registry.pid"
    MARKER_KEY = "registry"

    port: int = REGISTRY_PORT
    name: str = "schema-registry"

    @property
    def url(self) -> str:
        """The Confluent-compatible API: the value of `BRIDGE_SCHEMA_REGISTRY_URL`."""
        return f"http://{HOST}:{self.port}{CCOMPAT_PATH}"

    def command(self) -> tuple[list[str], Path]:
        """The java command line, and the folder it runs in (the runner jar finds `lib/` beside it)."""
        java = shutil.which("java")
        if java is None:
            raise StackError("Java is not installed: `apt-get install openjdk-17-jre-headless`, then retry")
        unpacked = ensure_jars("schema-registry")
        if not (unpacked / RUNNER).is_file():
            raise StackError(f"{unpacked} has no {RUNNER}; remove the folder and retry")
        return [java, HEAP, "-Djava.awt.headless=true", self.marker, f"-Dquarkus.http.host={HOST}",
                f"-Dquarkus.http.port={self.port}", "-jar", RUNNER], unpacked

    def up(self, timeout: float = 120.0) -> None:
        """Start the registry unless it runs, and wait until its Confluent API answers."""
        if not self.running():
            if port_open(self.port):
                raise StackError(f"port {self.port} is taken by another process; choose another --port "
                                 "(or OUTBOX_REGISTRY_PORT)")
            command, unpacked = self.command()
            self.home.mkdir(parents=True, exist_ok=True)
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_file, "ab") as out:
                proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, cwd=unpacked)
            self.pid_file.write_text(f"{proc.pid}\n{self.port}\n")  # the port, for `down` and `status`
            log(f"started Apicurio Registry {VERSION} (pid {proc.pid}); log {self.log_file}")
        self.wait_ready(timeout)
        log(f"schema registry is up: BRIDGE_SCHEMA_REGISTRY_URL={self.url}")

    def answers(self) -> bool:
        """Whether the Confluent API lists subjects (the storage is ready, not only the HTTP port)."""
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as response:
                return response.status == 200 and isinstance(json.load(response), list)
        except (OSError, ValueError):  # refused, reset, timed out, an HTTP error, or not JSON yet
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = read_pid(self.pid_file)  # the pid, not the marker: right after the fork it is still Python's
            if pid is None or not pid_alive(pid):
                raise StackError(f"the schema registry exited during start-up; see {self.log_file}\n{self.log_tail()}")
            if self.answers():
                return
            time.sleep(0.5)
        raise StackError(f"the schema registry did not answer at {self.url} within {timeout:.0f}s; "
                         f"see {self.log_file}\n{self.log_tail()}")

    def down(self, timeout: float = 30.0) -> None:
        """Stop it (SIGTERM, then SIGKILL past `timeout`) and wait until its port is free."""
        pid = read_pid(self.pid_file)
        if pid is not None:
            stop_pid(pid, self.marker, timeout=timeout)
            deadline = time.monotonic() + timeout
            while port_open(self.port) and time.monotonic() < deadline:
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)

def started_registry() -> SchemaRegistry | None:
    """The registry the stack started, on the port it was started with, if its pid file is there (`down` and
    `status` use it)."""
    pid_file = SchemaRegistry().pid_file
    try:
        lines = pid_file.read_text().split()
    except OSError:
        return None
    return SchemaRegistry(port=int(lines[1])) if len(lines) > 1 and lines[1].isdigit() else SchemaRegistry()
