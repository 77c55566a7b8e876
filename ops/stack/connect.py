"""A Kafka Connect worker without Docker, for running Debezium beside the bridge (tests and bench B8).

The worker and its jars come from Maven Central through the project's poms (ops/maven/kafka-connect for
the worker, ops/maven/debezium for the plugin, resolved into .cache/jars/connect and
.cache/jars/debezium/<plugin>), and it runs as a local process on loopback, with its data, log and pid
file under `.run/<name>/`.

Distributed mode, not standalone: it is how Debezium runs in production, so offsets and connector
configs live in Kafka topics (a restarted worker resumes where it committed, like the bridge resumes at
its persisted watermark), and the connector is created, paused, stopped and resumed over the same REST
API. The internal topics are named after the worker (`<name>.configs|offsets|status`) with replication
1 on the 1-broker stack, so several workers can share a broker without meeting.

The worker's producer is configured like the bridge's (idempotent, acks=all, at most 5 requests in
flight, and the bridge's default linger, batch size, compression and delivery timeout): Kafka Connect's
own producer defaults are not idempotent.

    python ops/connect.py jars
    python ops/connect.py up [--name connect] [--port 28083]
    python ops/connect.py down [--name connect] [--delete-topics]
    python ops/connect.py status
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stack.connect_api import ConnectApi, ConnectError
from stack.places import HOST, JARS, MAIN_KAFKA_PORT, MAVEN_SETTINGS, ROOT, RUN
from stack.processes import OwnedProcess, StackError, pid_alive, port_open, read_pid, stop_pid

WORKER_JARS = JARS / "connect"
PLUGIN_PATH = JARS / "debezium"
DEBEZIUM_PLUGIN = PLUGIN_PATH / "debezium-connector-postgres"
POMS = {
    WORKER_JARS: ROOT / "ops" / "maven" / "kafka-connect" / "pom.xml",
    DEBEZIUM_PLUGIN: ROOT / "ops" / "maven" / "debezium" / "pom.xml",
}
LOG_CONFIG = ROOT / "ops" / "kafka" / "connect-log4j2.properties"
DEFAULT_NAME = "connect"
DEFAULT_REST_PORT = int(os.environ.get("OUTBOX_CONNECT_PORT", "28083"))
HEAP = os.environ.get("OUTBOX_CONNECT_HEAP", "-Xms256m -Xmx1g")
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"


def log(message: str) -> None:
    print(f"[connect] {message}", flush=True)


def ensure_jars() -> tuple[Path, Path]:
    """Resolve the worker's jars and the Debezium plugin through Maven (once per pom); return both folders."""
    if shutil.which("mvn") is None:
        raise ConnectError("Maven (mvn) is not installed: `apt-get install maven`, then retry")
    for target, pom in POMS.items():
        marker = target / ".resolved"
        if marker.exists() and marker.read_text() == pom.read_text():
            continue
        log(f"resolving {pom.parent.name} jars from Maven Central into {target} (first run only)")
        if target.exists():
            shutil.rmtree(target)
        cmd = ["mvn", "-B", "-q", "-s", str(MAVEN_SETTINGS), "-f", str(pom),
               "dependency:copy-dependencies"]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ConnectError(f"Maven could not resolve {pom}:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
        marker.write_text(pom.read_text())
    return WORKER_JARS, PLUGIN_PATH


def bridge_like_producer() -> dict[str, str]:
    """The worker's producer overrides: the delivery guarantees of bridge/kafka/producer_settings.py and the
    bridge's default linger, batch size, compression and delivery timeout (read from its configuration)."""
    from bridge.config import BridgeConfig

    defaults = BridgeConfig()
    return {
        "enable.idempotence": "true",
        "acks": "all",
        "max.in.flight.requests.per.connection": "5",
        "retries": str(2**31 - 1),
        "linger.ms": str(defaults.linger_ms),
        "batch.size": str(defaults.batch_size),
        "compression.type": defaults.compression.value,
        "delivery.timeout.ms": str(defaults.delivery_timeout_ms),
    }


@dataclass(frozen=True)
class ConnectWorker(OwnedProcess, ConnectApi):
    """One distributed-mode worker (a one-member Connect cluster) on a loopback REST port."""

    PID_FILE_NAME = "worker.pid"
    MARKER_KEY = "connect"

    name: str = DEFAULT_NAME
    bootstrap: str = f"{HOST}:{MAIN_KAFKA_PORT}"
    rest_port: int = DEFAULT_REST_PORT
    replication: int = 1
    producer: Mapping[str, str] = field(default_factory=bridge_like_producer)
    # How often the worker commits source offsets (Debezium confirms the slot's LSN after each commit).
    offset_flush_ms: int = 60_000

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.rest_port}"

    @property
    def internal_topics(self) -> list[str]:
        return [f"{self.name}.configs", f"{self.name}.offsets", f"{self.name}.status"]

    def properties(self) -> str:
        configs, offsets, status = self.internal_topics
        lines = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.name,
            "config.storage.topic": configs,
            "offset.storage.topic": offsets,
            "status.storage.topic": status,
            "config.storage.replication.factor": self.replication,
            "offset.storage.replication.factor": self.replication,
            "status.storage.replication.factor": self.replication,
            "offset.storage.partitions": 5,
            "status.storage.partitions": 1,
            "offset.flush.interval.ms": self.offset_flush_ms,
            # Keys and values as plain strings: our key is aggregate_id, our value the payload text.
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "header.converter": "org.apache.kafka.connect.storage.SimpleHeaderConverter",
            "listeners": f"http://{HOST}:{self.rest_port}",
            "rest.advertised.host.name": HOST,
            "rest.advertised.port": self.rest_port,
            "plugin.path": str(PLUGIN_PATH),
            # The plugin jars carry service manifests: no reflective scan of every class at start-up.
            "plugin.discovery": "service_load",
            "topic.creation.enable": "true",
            **{f"producer.{key}": value for key, value in self.producer.items()},
        }
        return "".join(f"{key}={value}\n" for key, value in lines.items())

    def command(self) -> list[str]:
        worker_jars, _ = ensure_jars()
        java = shutil.which("java")
        if java is None:
            raise ConnectError("Java is not installed: `apt-get install openjdk-17-jre-headless`, then retry")
        return [java, *HEAP.split(), "-XX:+UseG1GC", "-Djava.awt.headless=true", self.marker,
                f"-Dlog4j2.configurationFile={LOG_CONFIG}", "-cp", f"{worker_jars}/*", MAIN_CLASS,
                str(self.home / "worker.properties")]

    def start(self, timeout: float = 120.0, wait: bool = True) -> None:
        """Start the worker unless it runs; wait (unless told not to) until its REST API answers and the
        Debezium plugin is loaded."""
        if not self.running():
            if port_open(self.rest_port):
                raise ConnectError(f"port {self.rest_port} is taken by another process; choose another --port")
            command = self.command()
            self.home.mkdir(parents=True, exist_ok=True)
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            (self.home / "worker.properties").write_text(self.properties())
            with open(self.log_file, "ab") as out:
                proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, cwd=self.home)
            self.pid_file.write_text(str(proc.pid))
            log(f"started worker {self.name} (pid {proc.pid}); REST at {self.url}, log {self.log_file}")
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # The pid, not the marker: right after the fork the child's command line is still Python's.
            pid = read_pid(self.pid_file)
            if pid is None or not pid_alive(pid):
                raise ConnectError(f"worker {self.name} exited during start-up; see {self.log_file}\n{self.log_tail()}")
            try:
                plugins = self.request("GET", "/connector-plugins")
                # A 200 on /connectors means the worker joined its group and read the config topic.
                self.request("GET", "/connectors")
            except ConnectError:
                time.sleep(0.5)
                continue
            classes = {p.get("class") for p in plugins}
            if "io.debezium.connector.postgresql.PostgresConnector" not in classes:
                raise ConnectError(f"the worker runs but has no Debezium PostgreSQL connector under {PLUGIN_PATH}; "
                                   f"plugins: {sorted(c for c in classes if c)}")
            return
        raise ConnectError(f"worker {self.name} did not answer at {self.url} within {timeout:.0f}s; "
                           f"see {self.log_file}\n{self.log_tail()}")

    def stop(self, kill: bool = False, timeout: float = 60.0) -> None:
        """SIGTERM (the worker stops its tasks and commits their offsets) and wait; SIGKILL with kill."""
        pid = read_pid(self.pid_file)
        if pid is not None:
            stop_pid(pid, self.marker, kill=kill, timeout=timeout)
            # The JVM's main thread can be gone (a zombie, which pid_alive counts as stopped) while its other
            # threads are still exiting with the REST socket open: a worker started at once could not bind it.
            deadline = time.monotonic() + timeout
            while port_open(self.rest_port) and time.monotonic() < deadline:
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)

    def delete_internal_topics(self) -> None:
        """Forget every connector, config and offset of this worker (it must be stopped)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        existing = set(admin.list_topics(timeout=30).topics)
        doomed = [t for t in self.internal_topics if t in existing]
        for topic, future in (admin.delete_topics(doomed) if doomed else {}).items():
            try:
                future.result(60)
            except KafkaException as exc:
                log(f"could not delete {topic}: {exc}")

def free_port() -> int:
    """A loopback port nothing listens on now, for a worker's REST API."""
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def workers() -> list[ConnectWorker]:
    """The workers that have a directory under .run (running or not), by name."""
    found = []
    for pid_file in sorted(RUN.glob(f"*/{ConnectWorker.PID_FILE_NAME}")):
        # No producer settings: stopping needs none, and `down` must work without the project installed.
        found.append(ConnectWorker(name=pid_file.parent.name, producer={}))
    return found


def stop_all() -> None:
    """Stop every Connect worker started from this checkout (the stack's `down` calls this)."""
    for worker in workers():
        if worker.running():
            log(f"stopping Kafka Connect worker {worker.name}")
        worker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("jars", help="resolve the worker and Debezium jars into .cache/jars")
    up = sub.add_parser("up", help="start a worker on the main Kafka cluster and wait until it answers")
    down = sub.add_parser("down", help="stop a worker")
    for command in (up, down):
        command.add_argument("--name", default=DEFAULT_NAME)
    up.add_argument("--port", type=int, default=DEFAULT_REST_PORT)
    up.add_argument("--bootstrap", default=f"{HOST}:{MAIN_KAFKA_PORT}")
    down.add_argument("--delete-topics", action="store_true", help="also delete its internal topics")
    sub.add_parser("status", help="show which workers run")
    args = parser.parse_args(argv)
    try:
        if args.command == "jars":
            for folder in ensure_jars():
                print(folder)
        elif args.command == "up":
            ConnectWorker(name=args.name, bootstrap=args.bootstrap, rest_port=args.port).start()
        elif args.command == "down":
            worker = ConnectWorker(name=args.name, producer={})
            worker.stop()
            if args.delete_topics:
                worker.delete_internal_topics()
        else:
            for worker in workers():
                print(f"{worker.name:<20} {'up' if worker.running() else 'down'}")
    except StackError as exc:
        print(f"[connect] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
