"""B8: the bridge beside Debezium (PostgreSQL connector + Outbox Event Router in Kafka Connect), same run.

Same PostgreSQL, same 1-broker Kafka, N events of 512-byte payloads, 6 partitions, records in our format
(ops/debezium.py). Each relay gets its own database and topic, and the two never run at the same time:
Debezium's phases first (its worker is then stopped), the bridge's after. Per relay:

- backlog: N rows ready before the relay looks. Debezium: rows written (WAL) while the connector is
  stopped, then resumed; measured warm, after a first, unmeasured-as-backlog run of N rows that follows the
  worker's start (reported as `cold_first_run`). Bridge: rows loaded before `outbox-bridge run` starts.
- concurrent: the relay running and caught up while N rows are COPYed in, in 1% transactions.
- cpu: user+system seconds of the relay process (the Connect worker's JVM; `outbox-bridge run`) per
  100,000 events, between the first new record and the last, in the backlog and concurrent phases; and
  PostgreSQL's own work for the relay: for Debezium the walsender that decodes the WAL for it, for the
  bridge the backends of its sessions (named `outbox-bridge`), which run its queries.
- restart: the relay stopped (SIGTERM), N rows written, the relay started again (a new JVM for Debezium):
  the first N events after the restart, and the time from the start to the first record.

The bridge runs its phases twice: with its defaults, and in exactly-once delivery (counted as a read_committed
consumer sees it). Order, rollbacks and crashes are B8-rows (bench/b8_rows.py), run for every relay right after.

A phase's rate is records acknowledged per second between the first sample that sees a new record and the
sample that sees all N (topic high watermarks, every 0.1 s), as in B1.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import psutil
import psycopg

from bench.bridge_process import BridgeProcess, bridge_env
from bench.context import Context
from bench.stack import KAFKA1, PG_HOST, PG_PORT, ROOT, pg_dsn
from bench.topics import TopicWatch
from bench.workload import AGGREGATE_TYPE, PAYLOAD_BYTES, Workload, load_postgres
from bridge.store.postgres import APPLICATION_NAME

sys.path.insert(0, str(ROOT / "ops"))
import debezium
from stack import connect  # ops/ holds scripts and the stack package, not on the path by default

log = logging.getLogger("bench.b8")

PARTITIONS = 6
KEYS = 10_000
CONNECTOR = "b8-outbox"
# Debezium's poll loop waits poll.interval.ms (default 500) whenever its queue is empty; 10 ms is the
# "tuned" setting of the hand measurement. Everything else keeps Debezium's defaults.
DEBEZIUM_TUNING = {"poll.interval.ms": "10"}


@dataclass
class Sample:
    at: float
    count: int
    cpu_s: float
    database_cpu_s: float


class DatabaseCpu:
    """CPU seconds PostgreSQL spent for a relay since the first sample: the backends `query` lists (one column,
    pid), looked up at most once a second on one connection. A backend that appears counts from its start; one
    that goes keeps what it used while it was seen."""

    def __init__(self, url: str, query: str, params: tuple[Any, ...] = ()) -> None:
        self._conn = psycopg.connect(pg_dsn(url.rsplit("/", 1)[1]), autocommit=True)
        self._query, self._params = query, params
        self._pids: list[int] = []
        self._looked_at = float("-inf")
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._sampled = False

    def __call__(self) -> float:
        now = time.monotonic()
        if now - self._looked_at >= 1.0:
            self._pids = [int(r[0]) for r in self._conn.execute(self._query, self._params).fetchall()]
            self._looked_at = now
        for pid in self._pids:
            used = process_cpu(pid)
            self._first.setdefault(pid, 0.0 if self._sampled else used)
            self._last[pid] = max(used, self._last.get(pid, 0.0))
        self._sampled = True
        return sum(last - self._first[pid] for pid, last in self._last.items())

    def close(self) -> None:
        self._conn.close()


class CpuSpan:
    """CPU seconds a relay's process (`pid()`) and PostgreSQL's sessions for it (`database`) use from now until
    `stop`, and the wall seconds in between."""

    def __init__(self, pid: Callable[[], int | None], database: DatabaseCpu) -> None:
        self._pid, self._database = pid, database
        self._started = time.monotonic()
        self._relay_before = process_cpu(pid())
        database()

    def stop(self) -> tuple[float, float, float]:
        """(relay CPU s, database CPU s, wall s); closes the database counter."""
        try:
            relay, database = process_cpu(self._pid()) - self._relay_before, self._database()
            return relay, database, time.monotonic() - self._started
        finally:
            self._database.close()


#: The walsender serving a replication slot (none while no connector reads it).
_WALSENDER = "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s AND active_pid IS NOT NULL"


def walsender(url: str, slot: str) -> DatabaseCpu:
    return DatabaseCpu(url, _WALSENDER, (slot,))


def bridge_backends(url: str) -> DatabaseCpu:
    return DatabaseCpu(url, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name = %s", (APPLICATION_NAME,))


def process_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def measure(watch: TopicWatch, baseline: int, events: int, relay_pid: Callable[[], int | None],
            database: Callable[[], DatabaseCpu], timeout: float, started_at: float | None = None,
            check: Callable[[], None] | None = None) -> dict[str, Any]:
    """Sample the topic's count (above baseline), the relay process's CPU and PostgreSQL's for it (`database`
    makes a fresh counter) until `events` new records are in."""
    database_cpu = database()
    try:
        return _measure(watch, baseline, events, relay_pid, database_cpu, timeout, started_at, check)
    finally:
        database_cpu.close()


def _measure(watch: TopicWatch, baseline: int, events: int, relay_pid: Callable[[], int | None],
             database_cpu: DatabaseCpu, timeout: float, started_at: float | None,
             check: Callable[[], None] | None) -> dict[str, Any]:
    begun = time.monotonic() if started_at is None else started_at
    deadline = time.monotonic() + timeout
    samples: list[Sample] = []
    while True:
        count = watch.count() - baseline
        samples.append(Sample(time.monotonic(), count, process_cpu(relay_pid()), database_cpu()))
        if count >= events:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{watch.topic}: {count} of {events} new records after {timeout:.0f}s")
        if check is not None:
            check()
        time.sleep(0.1)
    first = next(s for s in samples if s.count > 0)
    last = samples[-1]
    steady = max(last.at - first.at, 1e-6)
    rate = (last.count - first.count) / steady if last.at > first.at else 0.0
    cpu = last.cpu_s - first.cpu_s
    result = {
        "events": events,
        "events_per_s": round(rate, 1),
        "payload_mb_per_s": round(rate * PAYLOAD_BYTES / 1e6, 2),
        "steady_s": round(steady, 2),
        "first_record_after_s": round(first.at - begun, 2),
        "relay_cpu_s": round(cpu, 2),
        "relay_cpu_s_per_100k": round(cpu / max(last.count - first.count, 1) * 100_000, 2),
        "relay_cores": round(cpu / steady, 2),
    }
    database = last.database_cpu_s - first.database_cpu_s
    result["database_cpu_s_per_100k"] = round(database / max(last.count - first.count, 1) * 100_000, 2)
    return result


def _load(url: str, start: int, events: int, chunk: int | None = None) -> float:
    return load_postgres(pg_dsn(url.rsplit("/", 1)[1]), Workload(keys=KEYS), events, start=start,
                         chunk=chunk or 100_000)


def _load_concurrently(url: str, start: int, events: int) -> tuple[threading.Thread, dict[str, float]]:
    outcome: dict[str, float] = {}

    def load() -> None:
        outcome["insert_s"] = _load(url, start, events, chunk=max(500, events // 100))

    thread = threading.Thread(target=load, name="b8-writer", daemon=True)
    thread.start()
    return thread, outcome


def walsender_pid(url: str, slot: str) -> int | None:
    with psycopg.connect(pg_dsn(url.rsplit("/", 1)[1]), autocommit=True) as conn:
        row = conn.execute(_WALSENDER, (slot,)).fetchone()
    return int(row[0]) if row else None


def run_debezium(ctx: Context, events: int) -> dict[str, Any]:
    url = ctx.scratch.database("b8_dbz")
    dbname = url.rsplit("/", 1)[1]
    prefix = ctx.scratch.topic("b8-dbz.")
    topic = ctx.scratch.create_topic(KAFKA1, f"b8-dbz.outbox.event.{AGGREGATE_TYPE}", PARTITIONS, 1)
    slot = f"b8_{ctx.run_id}".lower()
    worker = connect.ConnectWorker(name=f"connect-b8-{uuid.uuid4().hex[:6]}", bootstrap=KAFKA1,
                                   rest_port=connect.free_port())
    config = debezium.outbox_connector_config(dbname=dbname, host=PG_HOST, port=PG_PORT, slot=slot,
                                              publication=slot, topic_prefix=prefix, partitions=PARTITIONS,
                                              tuning=DEBEZIUM_TUNING)
    watch = TopicWatch(KAFKA1, topic)
    result: dict[str, Any] = {"connector_tuning": DEBEZIUM_TUNING, "worker_producer": dict(worker.producer),
                              "worker_heap": connect.HEAP, "worker_mode": "distributed, one worker"}
    timeout = max(600, events / 200)
    try:
        began = time.monotonic()
        worker.start(timeout=180)
        result["worker_start_s"] = round(time.monotonic() - began, 1)
        result["kafka_connect_version"] = worker.request("GET", "/")["version"]
        worker.put_connector(CONNECTOR, config)
        worker.wait_state(CONNECTOR, "RUNNING", timeout=120)
        wait_slot_active(url, slot)
        relay, decoding = worker.pid, partial(walsender, url, slot)
        written = 0

        def backlog(label: str) -> dict[str, Any]:
            nonlocal written
            worker.stop_connector(CONNECTOR)
            worker.wait_state(CONNECTOR, "STOPPED", timeout=120)
            _load(url, written, events)
            written += events
            baseline = watch.count()
            started = time.monotonic()
            worker.resume(CONNECTOR)
            measured = measure(watch, baseline, events, relay, decoding, timeout, started_at=started)
            log.info("B8 Debezium %s: %.0f events/s", label, measured["events_per_s"])
            return measured

        result["cold_first_run"] = backlog("cold first run")
        result["backlog"] = backlog("backlog (warm)")
        baseline = watch.count()
        thread, outcome = _load_concurrently(url, written, events)
        written += events
        result["concurrent"] = measure(watch, baseline, events, relay, decoding, timeout)
        thread.join()
        result["concurrent"].update({k: round(v, 2) for k, v in outcome.items()})
        log.info("B8 Debezium concurrent: %.0f events/s", result["concurrent"]["events_per_s"])
        # Restart: a new JVM finds N rows of WAL behind its committed offset.
        worker.stop()
        _load(url, written, events)
        written += events
        baseline = watch.count()
        started = time.monotonic()
        worker.start(wait=False)
        result["restart"] = measure(watch, baseline, events, relay, decoding, timeout, started_at=started,
                                    check=_alive(worker))
        worker.wait_ready()
        log.info("B8 Debezium first %d after a restart: %.0f events/s", events, result["restart"]["events_per_s"])
    finally:
        watch.close()
        try:
            worker.delete_connector(CONNECTOR)
        except connect.ConnectError as exc:  # the worker is gone or stuck; the slot is dropped below anyway
            log.warning("B8: could not delete the connector: %s", exc)
        worker.stop()
        debezium.drop_slot(pg_dsn(dbname), slot, slot)
        worker.delete_internal_topics()
    return result


def _alive(worker: connect.ConnectWorker) -> Callable[[], None]:
    def check() -> None:
        if not worker.running():
            raise RuntimeError(f"the Connect worker exited; see {worker.log_file}")
    return check


def wait_slot_active(url: str, slot: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while walsender_pid(url, slot) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Debezium's slot {slot} was not active within {timeout:.0f}s")
        time.sleep(0.2)


def run_bridge(ctx: Context, events: int, label: str = "bridge",
               settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The bridge's phases with `settings` (BRIDGE_* variables). Exactly-once is counted as a read_committed
    consumer sees it: the last stable offsets, each transaction's marker taking an offset per partition (as in
    B1-delivery)."""
    url = ctx.scratch.database(f"b8_{label}")
    topic = ctx.scratch.create_topic(KAFKA1, f"b8-{label}.{AGGREGATE_TYPE}", PARTITIONS, 1)
    env = bridge_env(url, KAFKA1, f"bench-b8-{label}", ctx.scratch.topic(f"b8-{label}.{{aggregate_type}}"), 1,
                     **(settings or {}))
    watch = TopicWatch(KAFKA1, topic, committed=bool(settings and settings.get("BRIDGE_DELIVERY") == "exactly-once"))
    timeout = max(600, events / 200)
    result: dict[str, Any] = {"settings": "defaults (bridge/config/settings.py), 1-broker overrides as in B1"
                                          + "".join(f", {k}={v}" for k, v in (settings or {}).items())}
    queries = partial(bridge_backends, url)
    bridge: BridgeProcess | None = None
    written = 0
    try:
        _load(url, written, events)
        written += events
        bridge = BridgeProcess(env, ctx.raw(f"logs/{label}-b8.log")).start()
        current = bridge
        result["backlog"] = measure(watch, 0, events, lambda: current.pid, queries, timeout,
                                    started_at=bridge.started_at, check=bridge.check_running)
        log.info("B8 %s backlog: %.0f events/s", label, result["backlog"]["events_per_s"])
        baseline = watch.count()
        thread, outcome = _load_concurrently(url, written, events)
        written += events
        result["concurrent"] = measure(watch, baseline, events, lambda: current.pid, queries, timeout,
                                       check=bridge.check_running)
        thread.join()
        result["concurrent"].update({k: round(v, 2) for k, v in outcome.items()})
        log.info("B8 %s concurrent: %.0f events/s", label, result["concurrent"]["events_per_s"])
        bridge.stop()
        _load(url, written, events)
        written += events
        baseline = watch.count()
        bridge = BridgeProcess(env, ctx.raw(f"logs/{label}-b8.log")).start()
        restarted = bridge
        result["restart"] = measure(watch, baseline, events, lambda: restarted.pid, queries, timeout,
                                    started_at=bridge.started_at, check=bridge.check_running)
        log.info("B8 %s first %d after a restart: %.0f events/s", label, events, result["restart"]["events_per_s"])
    finally:
        watch.close()
        if bridge is not None:
            bridge.stop()
    return result


def run(ctx: Context) -> dict[str, Any]:
    events = ctx.sizes.b8_events
    result: dict[str, Any] = {
        "events_per_phase": events,
        "payload_bytes": PAYLOAD_BYTES,
        "partitions": PARTITIONS,
        "keys": KEYS,
        "debezium_version": "3.4.3.Final",
        "measured_warm": "Debezium's backlog and concurrent phases follow a first run of N events after the "
                         "worker started (reported as cold_first_run)",
        "record_format_differences": dict(debezium.DIFFERENCES),
    }
    connect.ensure_jars()
    result["debezium"] = run_debezium(ctx, events)
    result["bridge"] = run_bridge(ctx, events)
    result["bridge_exactly_once"] = run_bridge(ctx, events, "eos", {"BRIDGE_DELIVERY": "exactly-once"})
    for relay in ("bridge", "bridge_exactly_once"):
        ratios = {}
        for phase in ("backlog", "concurrent", "restart"):
            ours, theirs = result[relay][phase]["events_per_s"], result["debezium"][phase]["events_per_s"]
            ratios[phase] = round(ours / theirs, 2) if theirs else None
        result[f"{relay}_over_debezium"] = ratios
    return result
