"""The stack's processes, kept by pid: is one alive and ours, wait until it answers, stop it; `OwnedProcess`, where
a service run as one process keeps its folder, log, pid file and marker; the lock that serialises `up` and `down`;
and how the stack reports (`log`, `StackError`).

A pid file can outlive its process and the pid be given to another, so a process counts as ours only while
its command line carries the marker we started it with.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from stack.places import HOST, RUN


def log(message: str) -> None:
    print(f"[stack] {message}", flush=True)


class StackError(RuntimeError):
    """A service could not be installed, started or stopped; the message says what to look at."""


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def pid_is_ours(pid: int, marker: str) -> bool:
    """Guard against a recycled pid: the process's command line must carry our marker."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_for(predicate: object, what: str, timeout: float, log_file: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.25)
    tail = ""
    if log_file is not None and log_file.exists():
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-25:])
    raise StackError(f"{what} did not come up within {timeout:.0f}s; see {log_file}\n{tail}")


def stop_pid(pid: int, marker: str, kill: bool = False, timeout: float = 30.0) -> None:
    if not pid_alive(pid) or not pid_is_ours(pid, marker):
        return
    os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        log(f"pid {pid} ignored SIGTERM for {timeout:.0f}s; sending SIGKILL")
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.1)


class OwnedProcess:
    """A service the stack runs as one process of its own, named `name`: its folder and log under the run
    directory, its pid file there, and the marker on its command line that makes it ours to stop."""

    #: Set by each service: its pid file's name in its folder, and the word its marker carries.
    PID_FILE_NAME: ClassVar[str]
    MARKER_KEY: ClassVar[str]
    name: str

    @property
    def home(self) -> Path:
        return RUN / self.name

    @property
    def log_file(self) -> Path:
        return RUN / "logs" / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.home / self.PID_FILE_NAME

    @property
    def marker(self) -> str:
        return f"-Doutbox.stack.{self.MARKER_KEY}={self.home}"

    def pid(self) -> int | None:
        """The pid of the running process, if it is ours."""
        pid = read_pid(self.pid_file)
        if pid is None or not pid_alive(pid) or not pid_is_ours(pid, self.marker):
            return None
        return pid

    def running(self) -> bool:
        return self.pid() is not None

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def stack_lock() -> Iterator[None]:
    """Serialise `up`/`down` across processes (parallel test sessions share one stack)."""
    RUN.mkdir(parents=True, exist_ok=True)
    with open(RUN / "stack.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
