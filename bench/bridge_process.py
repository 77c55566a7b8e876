"""The bridge as users run it: `outbox-bridge run` in its own process, configured by environment.

A separate process keeps the harness's own work off the bridge's interpreter and lets the memory
benchmark sample the bridge's RSS alone (psutil, in a background thread). In a run that installed the wheel
(`bench.installed`, `INSTALLED`), the process is that installation's `outbox-bridge`; otherwise the checkout's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from bench.installed import Installation

ROOT = Path(__file__).resolve().parent.parent
#: The wheel installed into a fresh virtualenv (`bench.installed`), which `bench.run` makes for the run: every bridge
#: process, and the measurements that share its record building (the ceiling, the bare read-and-produce loop), run
#: on its interpreter, as users run them. None: they run the checkout's sources, the core as plain Python.
INSTALLED: Installation | None = None


@contextmanager
def plain_python() -> Iterator[None]:
    """Child processes started inside run the checkout's sources, the per-event core as plain Python, even in a
    run that installed the wheel."""
    global INSTALLED
    kept, INSTALLED = INSTALLED, None
    try:
        yield
    finally:
        INSTALLED = kept


def bridge_exe() -> Path:
    """The `outbox-bridge` the run measures: the installed wheel's, else the checkout's (this interpreter's)."""
    if INSTALLED is not None:
        return INSTALLED.bin_dir / "outbox-bridge"
    return Path(sys.executable).with_name("outbox-bridge")


def measurement_python() -> str:
    """The interpreter of the measurements that share the bridge's code: the installation's, else this one."""
    return str(INSTALLED.python) if INSTALLED is not None else sys.executable


def bridge_env(db_url: str, bootstrap: str, name: str, topic_template: str, replication: int,
               **settings: str | int | float) -> dict[str, str]:
    """The environment for `outbox-bridge run`; settings are extra variables such as BRIDGE_LINGER_MS=20."""
    env = {
        "OUTBOX_DB_URL": db_url,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "BRIDGE_NAME": name,
        "BRIDGE_TOPIC_TEMPLATE": topic_template,
        "BRIDGE_REPLICATION_FACTOR": str(replication),
        "BRIDGE_METRICS_PORT": "0",
    }
    if replication < 3:
        env["BRIDGE_ALLOW_SINGLE_BROKER"] = "true"
    env.update({key: str(value) for key, value in settings.items()})
    return env


def child_environ(settings: Mapping[str, str]) -> dict[str, str]:
    """The environment for a child process: the harness's own, minus any BRIDGE_*/OUTBOX_*/KAFKA_*/OTEL_* variable
    that would leak in (OTEL_TRACES_EXPORTER would turn tracing on), plus `settings`; `bench` importable. In a run
    with the installed wheel (`INSTALLED`) only `bench` is added to the path, not the checkout's root, so its `bridge`
    cannot shadow the installed one."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BRIDGE_", "OUTBOX_", "KAFKA_", "OTEL_")) and k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    if INSTALLED is not None:
        env["PYTHONPATH"] = str(INSTALLED.bench_path)
        env["PYTHONSAFEPATH"] = "1"  # `python -m` would put the working directory (the checkout) first otherwise
    else:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**env, **settings}


@dataclass
class Deliveries:
    """A delivery callback for a bare producer (the ceilings): counts what was acknowledged and what failed."""

    acked: int = 0
    failed: int = 0

    def __call__(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed += 1


def run_measurement(module: str, args: list[str], env: Mapping[str, str], what: str) -> dict[str, Any]:
    """Run `python -m module args` in its own process (like the bridge) with the bridge's environment `env`,
    and return the JSON object it prints last; `what` names it in the error when it fails."""
    result = subprocess.run(
        [measurement_python(), "-m", module, *args],
        env=child_environ(env), cwd=ROOT, capture_output=True, text=True, check=False, timeout=1800,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


#: Clock ticks per second, the unit of a thread's CPU times in /proc.
_TICKS = os.sysconf("SC_CLK_TCK")
#: Not a thread: the seconds the main thread has spent runnable but waiting for a core (the run queue, from
#: /proc/<pid>/task/<pid>/schedstat), sampled beside the threads' CPU. On these two cores a bridge beside three
#: brokers waited 45 to 52% of a drain, against 4 to 5% beside one (`bench/analysis.md`).
RUN_QUEUE = "main thread waiting for a core"


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each thread of a process (Linux /proc): `main` for the
    interpreter's main thread, librdkafka's by their own names (`rdk:...`), and any other Python thread summed as
    `other Python threads`, which share the process's name."""
    totals: dict[str, float] = {}
    process_name = ""
    try:
        process_name = Path(f"/proc/{pid}/comm").read_text().strip()
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return totals
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        if task.name == str(pid):
            name = "main"
        elif name == process_name:
            name = "other Python threads"
        totals[name] = totals.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _TICKS
    with suppress(OSError, IndexError, ValueError):  # a kernel without schedstats: left out
        # "time on a core, time waiting in the run queue (both in ns), time slices"
        totals[RUN_QUEUE] = int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[1]) / 1e9
    return totals


def thread_shares(samples: list[tuple[float, dict[str, float]]], start: float, end: float) -> dict[str, float]:
    """Each thread's CPU over [start, end] (monotonic seconds) as a share of one core, from `thread_cpu` samples:
    the first sample at or after `start` to the last at or before `end`."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2:
        return {}
    (t0, first), (t1, last) = inside[0], inside[-1]
    return {name: round(max(0.0, cpu - first.get(name, 0.0)) / (t1 - t0), 3) for name, cpu in last.items()
            if cpu - first.get(name, 0.0) > 0}


@dataclass
class ProcessSampler:
    """Samples a process's resident set size, and its threads' CPU times (`thread_cpu`), every `interval`
    seconds until stopped."""

    pid: int
    interval: float = 0.1
    samples: list[tuple[float, int]] = field(default_factory=list)
    #: (monotonic seconds, `thread_cpu`) pairs.
    threads: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ProcessSampler:
        self._thread = threading.Thread(target=self._run, name="process-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        process = psutil.Process(self.pid)
        started = time.monotonic()
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic() - started, process.memory_info().rss))
                self.threads.append((time.monotonic(), thread_cpu(self.pid)))
            except psutil.Error:
                return
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    @property
    def peak(self) -> int:
        return max((rss for _, rss in self.samples), default=0)


class BridgeProcess:
    """One `outbox-bridge run` subprocess, its log file, and with `sample` its RSS and thread CPU sampler."""

    def __init__(self, env: Mapping[str, str], log_path: Path, sample: bool = False) -> None:
        self.env = dict(env)
        self.log_path = log_path
        self.sample = sample
        self.process: subprocess.Popen[bytes] | None = None
        self.sampler: ProcessSampler | None = None
        self.started_at = 0.0

    def start(self) -> BridgeProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.started_at = time.monotonic()
            self.process = subprocess.Popen([str(bridge_exe()), "run"], env=child_environ(self.env), cwd=ROOT,
                                            stdout=log_file, stderr=subprocess.STDOUT)
        if self.sample:
            self.sampler = ProcessSampler(self.process.pid).start()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (graceful: drain, persist, release the lease) and wait; SIGKILL if it hangs."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.sampler is not None:
            self.sampler.stop()
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is drained or persisted."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)
        if self.sampler is not None:
            self.sampler.stop()

    def wait_leading(self, after_epoch: int = 0, timeout: float = 60) -> int:
        """Wait until this bridge holds the lease (an epoch above `after_epoch`); return the epoch."""
        from sqlalchemy import create_engine

        from bridge.store.offsets import OffsetStore

        engine = create_engine(self.env["OUTBOX_DB_URL"])
        store = OffsetStore(engine, self.env["BRIDGE_NAME"])
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.check_running()
                row = store.read()
                if row is not None and row.epoch > after_epoch and row.owner and f":{self.pid}:" in row.owner:
                    return row.epoch
                time.sleep(0.05)
        finally:
            engine.dispose()
        raise TimeoutError(f"the bridge did not take the lease within {timeout:.0f}s; log {self.log_path}")

    def watermark(self) -> int:
        """The bridge's persisted watermark (0 before its first persist)."""
        from sqlalchemy import create_engine

        from bridge.store.offsets import OffsetStore

        engine = create_engine(self.env["OUTBOX_DB_URL"])
        try:
            row = OffsetStore(engine, self.env["BRIDGE_NAME"]).read()
        finally:
            engine.dispose()
        return row.watermark if row is not None else 0

    def check_running(self) -> None:
        if not self.alive():
            tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
            raise RuntimeError(f"the bridge exited early (code {self.process and self.process.returncode}); "
                               f"log {self.log_path}:\n{tail}")
