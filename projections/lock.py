"""One writer per projection: the process running it holds a lock file beside the lake.

`run` takes the lock for as long as it runs; `replay` takes it to switch a rebuilt table over (or to
replay in place), so a replay never changes a checkpoint that a running query is using. The lock is an
advisory `flock`, released by the kernel when its holder dies, even by kill -9. Object stores have no
such lock: on a non-local lake the lock is not taken and a warning says the operator must stop the
running instance themselves.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import IO

from projections.lake import Lake, is_local, local_path

log = logging.getLogger(__name__)


class ProjectionLock:
    """The lock of one projection in one lake; `acquire` it, `release` it (or use it as a context manager)."""

    def __init__(self, lake: Lake, name: str) -> None:
        self.name = name
        self.path = lake.lock(name)
        self.local = is_local(self.path)
        self._handle: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def holder(self) -> str:
        """Who holds (or last held) the lock, as written in the file, for messages."""
        try:
            return local_path(self.path).read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def acquire(
        self, wait_s: float | None = 0.0, on_wait: Callable[[float], None] | None = None, every_s: float = 30.0
    ) -> bool:
        """Take the lock: at once (wait_s=0), within wait_s seconds, or waiting as long as it takes (None).

        `on_wait(waited_s)` is called when waiting starts and then every `every_s` seconds. Returns False if
        the lock was still held when the wait ran out.
        """
        if self._handle is not None:
            return True
        if not self.local:
            log.warning(
                "the lake is not a local path, so no lock keeps two writers of this projection apart; "
                "make sure no other instance of it is running",
                extra={"projection": self.name, "lock": self.path},
            )
            return True
        path = local_path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held open for as long as the lock is held
        started = time.monotonic()
        next_report = started
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if wait_s is not None and waited >= wait_s:
                    handle.close()
                    return False
                if on_wait is not None and time.monotonic() >= next_report:
                    on_wait(waited)
                    next_report = time.monotonic() + every_s
                time.sleep(0.2 if wait_s is None else min(0.2, max(0.01, wait_s - waited)))
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}) + "\n")
        handle.flush()
        self._handle = handle
        return True

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def __enter__(self) -> ProjectionLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
