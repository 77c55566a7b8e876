"""The services a benchmark runs against: the local stack, scratch databases and topics, and cleanup.

The suite shares the machine with other work, so it only ever creates and drops its own databases
(`bench_<run>_<name>`) and topics (`bench.<run>.*`), and starts a stack service only when it is not
already running.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bridge.migrate import upgrade

log = logging.getLogger("bench.stack")

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / ".run"
LOCALSTACK = ROOT / "ops" / "localstack.py"
PG_HOST, PG_PORT = "127.0.0.1", int(os.environ.get("OUTBOX_PG_PORT", "25432"))
KAFKA1_CLUSTER, KAFKA1 = "kafka", "127.0.0.1:9092"
KAFKA3_CLUSTER, KAFKA3_PORT = "kafka3", 29092
KAFKA3 = ",".join(f"127.0.0.1:{KAFKA3_PORT + i}" for i in range(3))


def jit_seconds(bootstrap: str) -> float | None:
    """CPU seconds the JIT compilers of the cluster's JVMs (brokers and controller) have used so far, from `jstat
    -compiler`; None when that is unknown (a cluster this stack did not start, or no JDK tools)."""
    cluster = {KAFKA1: KAFKA1_CLUSTER, KAFKA3: KAFKA3_CLUSTER}.get(bootstrap)
    pid_files = sorted((RUN_DIR / cluster).glob("node-*/broker.pid")) if cluster else []
    if not pid_files:
        return None
    total = 0.0
    for pid_file in pid_files:
        try:
            found = subprocess.run(["jstat", "-compiler", pid_file.read_text().strip()], capture_output=True,
                                   text=True, check=False, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        # "Compiled Failed Invalid Time FailedType FailedMethod", then one line of values.
        lines = found.stdout.split("\n")
        fields = lines[1].split() if found.returncode == 0 and len(lines) > 1 else []
        try:
            total += float(fields[3])
        except (IndexError, ValueError):
            return None
    return total


class StackUnavailable(RuntimeError):
    """A service the benchmark needs is not there and could not be started."""


def _localstack(*args: str) -> None:
    result = subprocess.run([sys.executable, str(LOCALSTACK), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackUnavailable(f"ops/localstack.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def _main_cluster_brokers() -> int | None:
    path = RUN_DIR / KAFKA1_CLUSTER / "cluster.json"
    return int(json.loads(path.read_text())["brokers"]) if path.exists() else None


def brokers_up(bootstrap: str, timeout: float = 10.0) -> int:
    """How many brokers the cluster at bootstrap reports (0 when it does not answer)."""
    try:
        return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout).brokers)
    except KafkaException:
        return 0


def ensure_stack() -> None:
    """Start PostgreSQL and the 1-broker cluster unless they already answer (the 3-broker one: `three_brokers`)."""
    brokers = _main_cluster_brokers()
    if brokers not in (None, 1):
        raise StackUnavailable(
            f"the main Kafka cluster runs {brokers} brokers; the 1-broker benchmarks need `make up BROKERS=1`"
        )
    if not _pg_answers() or brokers_up(KAFKA1, timeout=5) != 1:
        log.info("starting the local stack (PostgreSQL, Kafka 1 broker)")
        _localstack("up", "--brokers", "1")


@contextmanager
def three_brokers(scratch: Scratch) -> Iterator[None]:
    """The 3-broker cluster for the length of the block, stopped after it (this run's topics removed first) if
    the block started it: idle, its four JVMs took a fifth of the two cores from every benchmark run beside
    them (B1's 1-broker bridge drained at 56,000 events/s with it up, 80,000 without, r1206214550)."""
    started = brokers_up(KAFKA3, timeout=5) != 3
    if started:
        log.info("starting the 3-broker Kafka cluster %s", KAFKA3_CLUSTER)
        _localstack("kafka-up", "--cluster", KAFKA3_CLUSTER, "--brokers", "3", "--port", str(KAFKA3_PORT))
    try:
        yield
    finally:
        if started:
            scratch.remove_topics(KAFKA3)
            log.info("stopping the 3-broker Kafka cluster %s", KAFKA3_CLUSTER)
            _localstack("kafka-down", "--cluster", KAFKA3_CLUSTER)


def schema_registry_url() -> str:
    """The local stack's schema registry (Apicurio, Confluent's API), started unless it answers."""
    result = subprocess.run([sys.executable, str(LOCALSTACK), "registry-up"], capture_output=True, text=True,
                            check=False)
    for line in result.stdout.splitlines():
        _, found, url = line.partition("BRIDGE_SCHEMA_REGISTRY_URL=")
        if found and result.returncode == 0:
            return url.strip()
    raise StackUnavailable(f"ops/localstack.py registry-up failed:\n{result.stdout}\n{result.stderr}")


def _pg_answers() -> bool:
    try:
        with psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


def pg_url(database: str) -> str:
    return f"postgresql+psycopg://postgres@{PG_HOST}:{PG_PORT}/{database}"


def pg_dsn(database: str) -> str:
    """A libpq connection string for psycopg (the SQLAlchemy URL without the driver prefix)."""
    return f"host={PG_HOST} port={PG_PORT} user=postgres dbname={database}"


@dataclass
class Scratch:
    """Everything one run creates, so it can all be removed at the end, even after a failure."""

    run_id: str
    databases: list[str] = field(default_factory=list)
    sqlite_files: list[Path] = field(default_factory=list)
    topic_clusters: set[str] = field(default_factory=set)

    @property
    def topic_prefix(self) -> str:
        return f"bench.{self.run_id}."

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    def database(self, name: str) -> str:
        """Create a fresh PostgreSQL database with the outbox migrated; return its SQLAlchemy URL."""
        db = f"bench_{self.run_id}_{name}".lower()
        with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}"')
        self.databases.append(db)
        upgrade(pg_url(db))
        return pg_url(db)

    def sqlite(self, directory: Path, name: str) -> str:
        path = directory / f"{name}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        self.sqlite_files.append(path)
        url = f"sqlite:///{path}"
        upgrade(url)
        return url

    def create_topic(self, bootstrap: str, name: str, partitions: int, replication: int,
                     config: dict[str, str] | None = None) -> str:
        topic = self.topic(name)
        self.topic_clusters.add(bootstrap)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        settings = {"min.insync.replicas": str(max(1, replication - 1)), "unclean.leader.election.enable": "false"}
        settings.update(config or {})
        admin.create_topics([NewTopic(topic, partitions, replication, config=settings)])[topic].result(60)
        return topic

    def remove_topics(self, bootstrap: str) -> None:
        """Delete this run's topics on one cluster now (`cleanup` does it for every cluster at the end)."""
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(self.topic_prefix)]
            for topic, future in (admin.delete_topics(topics) if topics else {}).items():
                try:
                    future.result(60)
                except KafkaException as exc:
                    log.warning("could not delete topic %s: %s", topic, exc)
        except KafkaException as exc:
            log.warning("could not list topics on %s for cleanup: %s", bootstrap, exc)
        self.topic_clusters.discard(bootstrap)

    def use_cluster(self, bootstrap: str) -> None:
        """Remember a cluster the bridge may create topics on, so cleanup looks there too."""
        self.topic_clusters.add(bootstrap)

    def cleanup(self) -> None:
        for bootstrap in sorted(self.topic_clusters):
            self.remove_topics(bootstrap)
        for db in self.databases:
            for attempt in range(5):
                try:
                    with psycopg.connect(pg_dsn("postgres"), autocommit=True, connect_timeout=10) as conn:
                        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
                    break
                except psycopg.Error as exc:
                    log.warning("could not drop database %s (attempt %d): %s", db, attempt + 1, exc)
                    time.sleep(2)
        for path in self.sqlite_files:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
