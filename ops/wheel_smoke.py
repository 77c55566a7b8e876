"""Smoke test of an installed outbox-bridge, run by that installation's own interpreter, outside any checkout.

    python -I ops/wheel_smoke.py bridge --work DIR [--kafka HOST:PORT] [--expect-compiled]
    python -I ops/wheel_smoke.py projections --work DIR --kafka HOST:PORT

`bridge`: the installed files stay under `bridge` and `projections`; `outbox-bridge migrate` creates a SQLite outbox
in DIR and `migrate --sql` prints the DDL; `bridge.writer` appends order events; `outbox-bridge run` logs its
start-up line (naming the compiled core), serves /healthz and /readyz, publishes every event to a topic of its own
on the Kafka at --kafka and stops cleanly on SIGTERM; `outbox-bridge status --json` shows the watermark at the last
event. Without --kafka (an image build, which reaches no broker) the bridge runs only until it has logged its
start-up line and answered /healthz, and status shows nothing published.
`projections` (after `bridge`, with the `spark` extra, Java, and the connector jars in SPARK_JARS_DIR or
SPARK_PACKAGES=1): `outbox-projections list`, then one `run orders_current --available-now` over that topic into a
lake in DIR, and `status --lag` shows it caught up.

`make test` runs both against the wheel it builds, installed into a fresh virtualenv (tests/integration/ops); the
image (ops/Dockerfile) runs `bridge` without Kafka. `-I` keeps the working directory and PYTHONPATH off sys.path,
so nothing but the installation is imported. Each step prints one line; the first failure exits 1 saying what was
expected and what came.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DISTRIBUTION = "outbox-bridge"
EVENTS = 40
BRIDGE_NAME = "smoke"
PROJECTION = "orders_current"
#: What `bridge` leaves in the work directory for `projections`.
STATE_FILE = "smoke.json"


class SmokeFailure(Exception):
    """A step found something other than what it expected."""


def step(message: str) -> None:
    print(f"ok  {message}", flush=True)


def scripts_dir() -> Path:
    """Where this installation's console scripts are (the virtualenv's or the image's bin/)."""
    return Path(sys.executable).parent


def command(name: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> str:
    """Run one of the installation's console scripts; its stdout, or SmokeFailure with its output."""
    result = subprocess.run([str(scripts_dir() / name), *args], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})}, check=False)
    if result.returncode != 0:
        raise SmokeFailure(f"`{name} {' '.join(args)}` exited {result.returncode}:\n{result.stdout[-3000:]}\n"
                           f"{result.stderr[-3000:]}")
    return result.stdout


# ------------------------------------------------------------------------------------------------- bridge


def check_installed_files() -> None:
    """The distribution installs nothing top-level but `bridge` and `projections` (and its scripts and metadata),
    and the packages come from the installation, not from a checkout."""
    import bridge
    from bridge.migrate import MIGRATIONS_DIR

    files = importlib.metadata.files(DISTRIBUTION) or []
    tops = {f.parts[0] for f in files if f.parts[0] != ".." and not f.parts[0].endswith(".dist-info")}
    if tops != {"bridge", "projections"}:
        raise SmokeFailure(f"{DISTRIBUTION} installs {sorted(tops)} top-level; expected only bridge and projections")
    if importlib.util.find_spec("migrations") is not None:
        raise SmokeFailure("a top-level `migrations` package is importable; the wheel must ship it inside `bridge`")
    for package in ("bridge", "projections"):  # found, not imported: projections needs the `spark` extra
        spec = importlib.util.find_spec(package)
        root = Path(str(spec and spec.origin)).resolve().parent.parent
        if (root / "pyproject.toml").exists():
            raise SmokeFailure(f"{package} is imported from a checkout ({root}), not the installation")
    if Path(bridge.__file__).resolve().parent / "migrations" != MIGRATIONS_DIR:
        raise SmokeFailure(f"the migrations are read from {MIGRATIONS_DIR}, not from the installed bridge package")
    step(f"{len(files)} installed files, top-level only bridge and projections; migrations in {MIGRATIONS_DIR}")


def migrate(db_url: str) -> None:
    from bridge.migrate import head

    said = command("outbox-bridge", "migrate", "--db-url", db_url)
    if f"revision {head()}" not in said:
        raise SmokeFailure(f"`outbox-bridge migrate` did not reach revision {head()}: {said.strip()}")
    step(f"outbox-bridge migrate: a SQLite outbox at revision {head()}")
    for dialect in ("postgresql", "mssql"):
        ddl = command("outbox-bridge", "migrate", "--sql", "--db-url", f"{dialect}://")
        if "CREATE TABLE domain_events" not in ddl:
            raise SmokeFailure(f"`outbox-bridge migrate --sql` for {dialect} printed no CREATE TABLE domain_events")
        step(f"outbox-bridge migrate --sql: {dialect} DDL, {len(ddl.splitlines())} lines")


def append_events(db_url: str, count: int) -> list[str]:
    """Order events (the example projections' domain) appended with `bridge.writer` in one transaction."""
    from sqlalchemy import create_engine

    from bridge.writer import OutboxEvent, append

    events = []
    for number in range(count):
        order_id = f"order-{number % 10}"
        if number < 10:
            payload: dict[str, Any] = {"order_id": order_id, "customer": f"c-{number}", "amount": 10.5 + number,
                                       "currency": "EUR"}
            kind = "OrderPlaced"
        else:
            payload, kind = {"order_id": order_id, "amount": 10.5 + number % 10}, "OrderPaid"
        events.append(OutboxEvent(aggregate_type="order", aggregate_id=order_id, event_type=kind, payload=payload,
                                  event_id=str(uuid.uuid4())))
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            append(conn, events)
    finally:
        engine.dispose()
    step(f"bridge.writer.append: {count} events in one transaction")
    return [e.event_id for e in events]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@contextmanager
def running_bridge(env: Mapping[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`outbox-bridge run` in the background, its log to `log_path`; stopped with SIGTERM (killed if it hangs)."""
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen([str(scripts_dir() / "outbox-bridge"), "run"], stdout=log_file,
                                   stderr=subprocess.STDOUT, env={**os.environ, **env})
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def wait_for(what: str, check: Any, process: subprocess.Popen[bytes], log_path: Path, timeout: float = 60) -> Any:
    """Poll `check()` until it returns something truthy; SmokeFailure with the log if the bridge exits or time runs
    out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if process.poll() is not None:
            raise SmokeFailure(f"the bridge exited with {process.returncode} before {what}; its log:\n"
                               f"{log_path.read_text(errors='replace')[-4000:]}")
        time.sleep(0.2)
    raise SmokeFailure(f"no {what} within {timeout:.0f} s; the bridge's log:\n"
                       f"{log_path.read_text(errors='replace')[-4000:]}")


def startup_line(log_path: Path) -> dict[str, Any] | None:
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("msg") == "starting outbox bridge":
                return record  # type: ignore[no-any-return]
    return None


def check_compiled(record: dict[str, Any], expect_compiled: bool) -> None:
    from bridge.compiled import MODULES

    named = record.get("compiled_core")
    if expect_compiled and named != list(MODULES):
        raise SmokeFailure(f"the start-up line names compiled_core={named}; expected every module of {list(MODULES)}")
    step(f"start-up line: compiled_core={named}")


def read_topic(bootstrap: str, topic: str, wanted: set[str], timeout: float = 60) -> set[str]:
    """The `event_id` headers of the records in `topic`, read until all of `wanted` came or time runs out."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"smoke-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen: set[str] = set()
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout
    try:
        while not wanted <= seen and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            for header in message.headers() or []:
                if header[0] == "event_id" and isinstance(header[1], bytes):
                    seen.add(header[1].decode())
    finally:
        consumer.close()
    return seen


def status(db_url: str) -> dict[str, Any]:
    said = command("outbox-bridge", "status", "--json", env={"OUTBOX_DB_URL": db_url, "BRIDGE_NAME": BRIDGE_NAME})
    return json.loads(said)  # type: ignore[no-any-return]


def smoke_bridge(work: Path, kafka: str | None, expect_compiled: bool) -> None:
    check_installed_files()
    db_url = f"sqlite:///{work / 'outbox.db'}"
    migrate(db_url)
    event_ids = append_events(db_url, EVENTS)
    run_id = uuid.uuid4().hex[:8]
    template = f"smoke.{run_id}.{{aggregate_type}}"
    port = free_port()
    env = {
        "OUTBOX_DB_URL": db_url,
        # Without Kafka, a port nothing listens on: the bridge starts, logs and serves /healthz, and waits.
        "KAFKA_BOOTSTRAP_SERVERS": kafka or f"127.0.0.1:{free_port()}",
        "BRIDGE_NAME": BRIDGE_NAME,
        "BRIDGE_TOPIC_TEMPLATE": template,
        "BRIDGE_REPLICATION_FACTOR": "1",
        "BRIDGE_ALLOW_SINGLE_BROKER": "true",
        "BRIDGE_TOPIC_PARTITIONS": "3",
        "BRIDGE_METRICS_HOST": "127.0.0.1",
        "BRIDGE_METRICS_PORT": str(port),
    }
    log_path = work / "bridge.log"
    with running_bridge(env, log_path) as process:
        check_compiled(wait_for("start-up line", lambda: startup_line(log_path), process, log_path),
                       expect_compiled)
        wait_for("answer on /healthz", lambda: http_status(port, "/healthz") == 200, process, log_path)
        step(f"GET /healthz on port {port}: 200")
        if kafka is None:
            readiness = http_status(port, "/readyz")
            if readiness != 503:
                raise SmokeFailure(f"/readyz answered {readiness} with no Kafka to reach; expected 503")
            step("GET /readyz without Kafka: 503")
        else:
            wait_for("ready on /readyz", lambda: http_status(port, "/readyz") == 200, process, log_path)
            step(f"GET /readyz on port {port}: 200")
            topic = template.format(aggregate_type="order")
            seen = read_topic(kafka, topic, set(event_ids))
            if not set(event_ids) <= seen:
                raise SmokeFailure(f"{len(set(event_ids) - seen)} of {len(event_ids)} events never reached {topic}")
            step(f"outbox-bridge run: all {len(event_ids)} events in {topic}")
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    if code != 0:
        raise SmokeFailure(f"the bridge exited {code} on SIGTERM; expected 0. Its log:\n"
                           f"{log_path.read_text(errors='replace')[-4000:]}")
    step("SIGTERM: the bridge stopped with exit code 0")
    report = status(db_url)
    expected = EVENTS if kafka else 0
    if report.get("watermark") != expected or report.get("head_seq") != EVENTS:
        raise SmokeFailure(f"status --json: watermark {report.get('watermark')}, head {report.get('head_seq')}; "
                           f"expected {expected} and {EVENTS}")
    step(f"outbox-bridge status --json: watermark {report['watermark']}, head {report['head_seq']}")
    (work / STATE_FILE).write_text(json.dumps({"topic_template": template, "events": EVENTS, "kafka": kafka}))


# -------------------------------------------------------------------------------------------- projections


def smoke_projections(work: Path, kafka: str) -> None:
    state = json.loads((work / STATE_FILE).read_text())
    listed = command("outbox-projections", "list")
    if not re.search(rf"\b{PROJECTION}\b", listed):
        raise SmokeFailure(f"`outbox-projections list` does not list {PROJECTION}:\n{listed}")
    step(f"outbox-projections list: {len(listed.splitlines())} lines, {PROJECTION} among them")
    where = ["--lake", str(work / "lake"), "--bootstrap-servers", kafka]
    started = time.monotonic()
    command("outbox-projections", "run", PROJECTION, "--available-now", "--metrics-port", "0", *where,
            "--topic-template", state["topic_template"], timeout=600)
    step(f"outbox-projections run {PROJECTION} --available-now ({time.monotonic() - started:.0f} s)")
    report = json.loads(command("outbox-projections", "status", PROJECTION, "--json", "--lag", *where))
    progress = report.get("progress") or {}
    read = sum(sum(partitions.values()) for partitions in progress.get("offsets", {}).values())
    lag = report.get("lag", {})
    if read != state["events"] or progress.get("max_seq") != state["events"] or any(v != 0 for v in lag.values()):
        raise SmokeFailure(f"status --lag: {read} records read up to seq {progress.get('max_seq')}, lag {lag}; "
                           f"expected {state['events']}, {state['events']} and 0")
    if not list((work / "lake" / PROJECTION / "_delta_log").glob("*.json")):
        raise SmokeFailure(f"no Delta table at {work / 'lake' / PROJECTION}")
    step(f"outbox-projections status --lag: {read} records read up to seq {progress['max_seq']}, lag {lag}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("bridge", "projections"))
    parser.add_argument("--work", type=Path, required=True, help="where the outbox, logs and lake go (created)")
    parser.add_argument("--kafka", help="Kafka bootstrap servers; without them `bridge` publishes nothing")
    parser.add_argument("--expect-compiled", action="store_true",
                        help="fail unless the bridge runs every module of bridge.compiled.MODULES compiled")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    work = args.work.resolve()
    try:
        if args.part == "bridge":
            smoke_bridge(work, args.kafka, args.expect_compiled)
        elif args.kafka is None:
            parser.error("projections needs --kafka")
        else:
            smoke_projections(work, args.kafka)
    except SmokeFailure as exc:
        print(f"FAILED  {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
