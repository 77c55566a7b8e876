#!/usr/bin/env python3
"""The local stack without Docker: Apache Kafka brokers (KRaft) and PostgreSQL as processes on loopback.

Everything lives under `.run/` (data, logs, pid files) and the JVM jars under `.cache/jars/`, both at the
repository root. `up` is idempotent and waits until every service answers; `down` stops every process it
started, by pid. Fault tests use `broker-stop` / `broker-start` on a named cluster.

    python ops/localstack.py up [--brokers 3] [--secure]
    python ops/localstack.py down
    python ops/localstack.py status
    python ops/localstack.py kafka-up --cluster kafka3 --brokers 3 --port 29092
    python ops/localstack.py kafka-up --cluster ksecure --brokers 1 --port 39092 --secure
    python ops/localstack.py broker-stop --cluster kafka3 --node 2 [--kill]
    python ops/localstack.py broker-start --cluster kafka3 --node 2
A `--secure` cluster listens with SASL_SSL (SCRAM-SHA-512) only: a CA and broker key made for the run
under `<cluster>/tls/`, the StandardAuthorizer with no access without an ACL, brokers and the controller
talking SASL_SSL too (the controller listener authenticates with PLAIN). Its users, passwords and the CA
path are in `<cluster>/client.env` (mode 0600); see `ops/kafka_security.py`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import glob
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUN = Path(os.environ.get("OUTBOX_RUN_DIR", ROOT / ".run")).resolve()
JARS = ROOT / ".cache" / "jars"
MAVEN_SETTINGS = ROOT / "ops" / "maven" / "settings.xml"
HOST = "127.0.0.1"

MAIN_CLUSTER = "kafka"
MAIN_KAFKA_PORT = int(os.environ.get("OUTBOX_KAFKA_PORT", "9092"))
# Below the kernel's ephemeral range (32768-60999), so no client connection can hold the port when a server
# wants to bind it.
PG_PORT = int(os.environ.get("OUTBOX_PG_PORT", "25432"))
PG_DATABASE = "outbox"
KAFKA_HEAP = os.environ.get("OUTBOX_KAFKA_HEAP", "-Xms128m -Xmx512m")


def log(message: str) -> None:
    print(f"[stack] {message}", flush=True)


class StackError(RuntimeError):
    """A service could not be installed, started or stopped; the message says what to look at."""


# --------------------------------------------------------------------------------------------- processes


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


# -------------------------------------------------------------------------------------------------- jars


def ensure_jars(which: str) -> Path:
    """Resolve the JVM artifacts for `kafka` (broker) or `spark` (connectors) through Maven, once."""
    pom = ROOT / "ops" / "maven" / {"kafka": "kafka-broker", "spark": "spark-connectors"}[which] / "pom.xml"
    target = JARS / which
    marker = target / ".resolved"
    if marker.exists() and marker.read_text() == pom.read_text():
        return target
    if shutil.which("mvn") is None:
        raise StackError("Maven (mvn) is not installed: `apt-get install maven`, then retry")
    log(f"resolving {which} jars from Maven Central into {target} (first run only)")
    if target.exists():
        shutil.rmtree(target)
    cmd = ["mvn", "-B", "-q", "-s", str(MAVEN_SETTINGS), "-f", str(pom), "dependency:copy-dependencies"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"Maven could not resolve {pom}:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    marker.write_text(pom.read_text())
    return target


# ------------------------------------------------------------------------------------------------- kafka


def kafka_security() -> ModuleType:
    """ops/kafka_security.py (ops/ is scripts, not a package; tests load this file by path too)."""
    name = "outbox_ops_kafka_security"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "kafka_security.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@dataclass(frozen=True)
class KafkaCluster:
    """A KRaft cluster on consecutive loopback ports.

    One broker runs as a combined broker+controller. With more brokers a dedicated controller (node 0) runs
    beside brokers 1..N, so that killing brokers in fault tests never costs the controller quorum: the
    controller keeps electing leaders and shrinking ISRs, as it would in a production cluster.

    With `advertised_port`, broker N tells clients to connect to `advertised_port + N - 1` instead of the
    port it listens on: a test puts a proxy there so that every client connection goes through it.

    With `secure`, every listener is SASL_SSL (see ops/kafka_security.py) and clients need the settings in
    `client_env_file`.
    """

    name: str
    brokers: int
    port: int
    advertised_port: int | None = None
    secure: bool = False

    @property
    def home(self) -> Path:
        return RUN / self.name

    def client_port(self, node: int) -> int:
        return self.port + node - 1

    @property
    def controller_port(self) -> int:
        return self.port + 100

    @property
    def nodes(self) -> list[int]:
        """Process numbers: 0 is the dedicated controller (multi-broker only), 1..N are brokers."""
        return list(range(1, 2)) if self.brokers == 1 else list(range(0, self.brokers + 1))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{self.client_port(n)}" for n in range(1, self.brokers + 1))

    def pid_file(self, node: int) -> Path:
        return self.home / f"node-{node}" / "broker.pid"

    def log_file(self, node: int) -> Path:
        return RUN / "logs" / f"{self.name}-{node}.log"

    def marker(self, node: int) -> str:
        return f"-Doutbox.stack.node={self.home}/node-{node}"

    # --------------------------------------------------------------------------------- security

    @property
    def listener(self) -> str:
        return "SASL_SSL" if self.secure else "PLAINTEXT"

    @property
    def client_env_file(self) -> Path:
        """Secured clusters: bootstrap, protocol, CA and a user and password per role (mode 0600)."""
        return self.home / "client.env"

    def tls(self) -> Any:
        return kafka_security().Tls(self.home / "tls")

    def credentials(self) -> Any:
        return kafka_security().Credentials.load_or_make(self.home / "credentials.json")

    def admin_conf(self) -> dict[str, Any]:
        """librdkafka settings of an admin client: the super user on a secured cluster."""
        if not self.secure:
            return {"bootstrap.servers": self.bootstrap}
        return dict(kafka_security().admin_client_conf(self.bootstrap, self.tls(), self.credentials()))

    def client_env(self) -> dict[str, str]:
        if not self.secure:
            return {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}
        return dict(kafka_security().client_env(self.bootstrap, self.tls(), self.credentials()))

    def save(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "cluster.json").write_text(
            json.dumps({"name": self.name, "brokers": self.brokers, "port": self.port, "secure": self.secure})
        )

    @classmethod
    def load(cls, name: str) -> KafkaCluster | None:
        path = RUN / name / "cluster.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(name=data["name"], brokers=data["brokers"], port=data["port"], secure=data.get("secure", False))

    def properties(self, node: int) -> str:
        n = self.brokers
        min_isr = max(1, n - 1)
        controller_id = 1 if n == 1 else 0
        controller = f"CONTROLLER://{HOST}:{self.controller_port}"
        security = self._security_properties()
        if node == 0:
            return "\n".join(
                [
                    "process.roles=controller",
                    "node.id=0",
                    f"controller.quorum.voters={controller_id}@{HOST}:{self.controller_port}",
                    f"listeners={controller}",
                    "controller.listener.names=CONTROLLER",
                    *(security or ["listener.security.protocol.map=CONTROLLER:PLAINTEXT"]),
                    f"log.dirs={self.home}/node-0/data",
                    "",
                ]
            )
        listener = self.listener
        listeners = f"{listener}://{HOST}:{self.client_port(node)}"
        advertised = listeners
        if self.advertised_port is not None:
            advertised = f"{listener}://{HOST}:{self.advertised_port + node - 1}"
        return "\n".join(
            [
                "process.roles=broker,controller" if n == 1 else "process.roles=broker",
                f"node.id={node}",
                f"controller.quorum.voters={controller_id}@{HOST}:{self.controller_port}",
                f"listeners={listeners},{controller}" if n == 1 else f"listeners={listeners}",
                f"advertised.listeners={advertised}",
                "controller.listener.names=CONTROLLER",
                f"inter.broker.listener.name={listener}",
                *(security or ["listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"]),
                f"log.dirs={self.home}/node-{node}/data",
                "num.partitions=3",
                f"default.replication.factor={n}",
                f"min.insync.replicas={min_isr}",
                "unclean.leader.election.enable=false",
                "auto.create.topics.enable=false",
                f"offsets.topic.replication.factor={n}",
                "offsets.topic.num.partitions=10",
                f"transaction.state.log.replication.factor={n}",
                f"transaction.state.log.min.isr={min_isr}",
                f"share.coordinator.state.topic.replication.factor={n}",
                f"share.coordinator.state.topic.min.isr={min_isr}",
                "group.initial.rebalance.delay.ms=0",
                "num.network.threads=2",
                "num.io.threads=4",
                "log.retention.hours=168",
                "log.segment.bytes=268435456",
                # Small clusters on one machine: notice a dead peer quickly.
                "replica.lag.time.max.ms=10000",
                "broker.session.timeout.ms=9000",
                "broker.heartbeat.interval.ms=1000",
                "",
            ]
        )

    def _security_properties(self) -> list[str]:
        if not self.secure:
            return []
        creds = self.credentials()
        tls = self.tls()
        tls.make(creds.keystore, HOST)
        return list(kafka_security().broker_properties(tls, creds, self.listener))

    def java(self, main: str, *args: str, node: int) -> list[str]:
        jars = ensure_jars("kafka")
        java = shutil.which("java")
        if java is None:
            raise StackError("Java is not installed: `apt-get install openjdk-17-jre-headless`, then retry")
        return [
            java,
            *KAFKA_HEAP.split(),
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            self.marker(node),
            f"-Dlog4j2.configurationFile={ROOT / 'ops' / 'kafka' / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={RUN / 'logs'}",
            "-cp",
            f"{jars}/*",
            main,
            *args,
        ]

    def format_node(self, node: int, cluster_id: str) -> None:
        node_dir = self.home / f"node-{node}"
        node_dir.mkdir(parents=True, exist_ok=True)
        config = node_dir / "server.properties"
        config.write_text(self.properties(node))
        if self.secure:
            config.chmod(0o600)  # holds the keystore, admin and controller passwords
        if (node_dir / "data" / "meta.properties").exists():
            return
        scram = kafka_security().scram_format_args(self.credentials()) if self.secure else []
        # `--cluster-id=<id>`, not `-t <id>`: a base64url id may start with "-", which argparse takes for an option.
        cmd = self.java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(config), *scram,
                        node=node)
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StackError(f"formatting {self.name} node {node} failed:\n{result.stdout}\n{result.stderr}")

    def node_running(self, node: int) -> bool:
        pid = read_pid(self.pid_file(node))
        return pid is not None and pid_alive(pid) and pid_is_ours(pid, self.marker(node))

    def start_node(self, node: int) -> None:
        if self.node_running(node):
            return
        (RUN / "logs").mkdir(parents=True, exist_ok=True)
        config = self.home / f"node-{node}" / "server.properties"
        with open(self.log_file(node), "ab") as out:
            proc = subprocess.Popen(
                self.java("kafka.Kafka", str(config), node=node),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.home,
            )
        self.pid_file(node).write_text(str(proc.pid))

    def stop_node(self, node: int, kill: bool = False) -> None:
        pid = read_pid(self.pid_file(node))
        if pid is not None:
            stop_pid(pid, self.marker(node), kill=kill)
        self.pid_file(node).unlink(missing_ok=True)

    def wait_ready(self, timeout: float = 120.0, nodes: list[int] | None = None) -> None:
        nodes = [n for n in (nodes or self.nodes) if n != 0]
        for node in nodes:
            wait_for(
                lambda node=node: port_open(self.client_port(node)),
                f"Kafka {self.name} node {node} on port {self.client_port(node)}",
                timeout,
                self.log_file(node),
            )
        wanted = set(range(1, self.brokers + 1)) if nodes == [n for n in self.nodes if n != 0] else set(nodes)
        wait_for(
            lambda: wanted <= self._registered_brokers(),
            f"Kafka {self.name}: broker(s) {sorted(wanted)} registered",
            timeout,
        )

    def _registered_brokers(self) -> set[int]:
        import logging

        from confluent_kafka.admin import AdminClient

        quiet = logging.getLogger("localstack.kafka")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        admin = AdminClient({**self.admin_conf(), "socket.timeout.ms": 3000, "logger": quiet})
        try:
            metadata = admin.list_topics(timeout=3)
        except Exception:  # noqa: BLE001 - any failure here means "not ready yet"
            return set()
        return set(metadata.brokers)

    def up(self) -> None:
        existing = KafkaCluster.load(self.name)
        if existing is not None and existing != self and existing.any_running():
            raise StackError(
                f"Kafka cluster {self.name!r} is already running with {existing.brokers} broker(s) on port "
                f"{existing.port}; run `make down` first to start it with {self.brokers}"
            )
        if existing is not None and existing != self:
            shutil.rmtree(self.home)
        self.save()
        id_file = self.home / "cluster.id"
        if not id_file.exists():
            id_file.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
        cluster_id = id_file.read_text().strip()
        for node in self.nodes:
            self.format_node(node, cluster_id)
        started = [n for n in self.nodes if not self.node_running(n)]
        for node in started:
            self.start_node(node)
        if started:
            log(f"started Kafka {self.name} node(s) {started}; waiting for the cluster at {self.bootstrap}")
        self.wait_ready()
        if self.secure:
            security = kafka_security()
            security.provision(self.bootstrap, self.tls(), self.credentials())
            security.write_env_file(self.client_env_file, self.client_env())
            log(f"Kafka {self.name}: SASL_SSL ({security.MECHANISM}) with ACLs; users and CA in {self.client_env_file}")
        log(f"Kafka {self.name} ready: {self.brokers} broker(s) at {self.bootstrap}")

    def any_running(self) -> bool:
        return any(self.node_running(n) for n in self.nodes)

    def down(self) -> None:
        # Brokers first, so they can shut down cleanly while the controller still answers.
        for node in sorted(self.nodes, reverse=True):
            self.stop_node(node)


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


# -------------------------------------------------------------------------------------------- postgresql


def pg_bin() -> Path:
    """The newest installed PostgreSQL server binaries, installing Debian's package when there are none."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        if os.geteuid() != 0:
            raise StackError("PostgreSQL server is not installed: `sudo apt-get install postgresql`, then retry")
        log("installing PostgreSQL from Debian's packages (first run only; its system service left off)")
        subprocess.run([str(ROOT / "ops" / "apt-install.sh"), "postgresql"], check=True)  # a line per package
        candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
        if not candidates:
            raise StackError("apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb was found")
    return Path(candidates[-1]).parent


def as_pg_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root; run it as the `postgres` account the package created."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


# ------------------------------------------------------------------------------------------ certificates


def openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {result.stderr.strip()}; is openssl installed?")


def make_certificate_authority(directory: Path, name: str) -> None:
    """`ca.key` and a self-signed `ca.crt` in directory, valid for a year."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365", "-subj", f"/CN={name}",
            "-keyout", str(directory / "ca.key"), "-out", str(directory / "ca.crt"),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    (directory / "ca.key").chmod(0o600)


def sign_server_certificate(directory: Path, stem: str, common_name: str, alt_names: list[str]) -> None:
    """`<stem>.key` and `<stem>.crt` signed by directory's CA, for the given subjectAltNames."""
    key, csr, crt = (directory / f"{stem}.{ext}" for ext in ("key", "csr", "crt"))
    openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={common_name}",
            "-keyout", str(key), "-out", str(csr))
    extensions = directory / f"{stem}.ext"
    extensions.write_text(f"subjectAltName = {', '.join(alt_names)}\nextendedKeyUsage = serverAuth\n"
                          "basicConstraints = critical,CA:FALSE\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(directory / "ca.crt"), "-CAkey", str(directory / "ca.key"),
            "-CAcreateserial", "-days", "365", "-sha256", "-extfile", str(extensions), "-out", str(crt))
    csr.unlink()
    extensions.unlink()


class Postgres:
    """A private PostgreSQL cluster in `.run/pg`, listening on 127.0.0.1 only."""

    def __init__(self, port: int = PG_PORT) -> None:
        self.port = port
        self.home = RUN / "pg"
        self.data = self.home / "data"
        self.socket_dir = self.home / "socket"
        self.log_file = RUN / "logs" / "postgres.log"
        self.tls_dir = self.home / "tls"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the server's certificate: clients verify with sslmode=verify-full&sslrootcert=."""
        return self.tls_dir / "ca.crt"

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@{HOST}:{self.port}/postgres"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{HOST}:{self.port}/{PG_DATABASE}"

    def _chown(self, *paths: Path) -> None:
        if os.geteuid() == 0:
            for path in paths:
                shutil.chown(path, "postgres", "postgres")

    def running(self) -> bool:
        pid = read_pid(self.data / "postmaster.pid")
        return pid is not None and pid_alive(pid) and port_open(self.port)

    def up(self) -> None:
        binaries = pg_bin()
        (RUN / "logs").mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if not self.log_file.exists():
            self.log_file.touch()
        self._chown(self.home, self.socket_dir, self.log_file)
        # The postgres account must be able to reach .run/pg through the repository's directories.
        if os.geteuid() == 0:
            for parent in [RUN, *RUN.parents]:
                parent.chmod(parent.stat().st_mode | 0o001)
        if not (self.data / "PG_VERSION").exists():
            log(f"initialising PostgreSQL in {self.data}")
            subprocess.run(
                as_pg_user(
                    [str(binaries / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
                ),
                check=True,
                stdout=subprocess.DEVNULL,
            )
            with open(self.data / "postgresql.conf", "a") as conf:
                conf.write(
                    "\n# outbox local stack\n"
                    f"listen_addresses = '{HOST}'\n"
                    f"port = {self.port}\n"
                    f"unix_socket_directories = '{self.socket_dir}'\n"
                    "max_connections = 300\n"
                    "max_prepared_transactions = 20\n"
                    "shared_buffers = 256MB\n"
                    "wal_level = logical\n"
                    "log_min_messages = warning\n"
                )
        self._ensure_tls()
        changed = self._ensure_access()
        if self.running() and changed:
            # An older stack: TLS and password logins take effect on a reload, without a restart.
            subprocess.run(as_pg_user([str(binaries / "pg_ctl"), "-D", str(self.data), "reload"]),
                           capture_output=True, check=True)
        if not self.running():
            log(f"starting PostgreSQL on {HOST}:{self.port}")
            result = subprocess.run(
                as_pg_user(
                    # Two-phase transactions hold the horizon too; tests need them enabled (also for older data dirs).
                    [str(binaries / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_file), "-w", "-t", "60",
                     "-o", f"-p {self.port} -c max_prepared_transactions=20", "start"]
                ),
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                raise StackError(f"PostgreSQL did not start: {result.stderr or result.stdout}; see {self.log_file}")
        wait_for(lambda: port_open(self.port), f"PostgreSQL on port {self.port}", 60, self.log_file)
        self._ensure_database()
        wait_for(self._tls_on, f"TLS on PostgreSQL port {self.port}", 30, self.log_file)
        log(f"PostgreSQL ready at {self.url} (TLS: sslmode=verify-full&sslrootcert={self.ca_file})")

    def _ensure_tls(self) -> None:
        """A CA and a server certificate for 127.0.0.1 and localhost, made once per run directory."""
        server_crt, server_key = self.tls_dir / "server.crt", self.tls_dir / "server.key"
        if server_crt.exists() and server_key.exists() and self.ca_file.exists():
            return
        log(f"making a CA and a server certificate for PostgreSQL in {self.tls_dir}")
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        make_certificate_authority(self.tls_dir, f"outbox local stack CA {uuid.uuid4().hex[:8]}")
        sign_server_certificate(self.tls_dir, "server", "localhost", ["DNS:localhost", f"IP:{HOST}"])
        server_key.chmod(0o600)
        self._chown(self.tls_dir, server_crt, server_key, self.ca_file)

    def _ensure_access(self) -> bool:
        """TLS on, and password (SCRAM) logins for every role but the stack's passwordless superuser;
        returns whether a file changed. Plain connections keep working: `host` lines match both."""
        tls_conf = self.data / "outbox_tls.conf"
        wanted_conf = (
            "# outbox local stack: TLS with the certificate of .run/pg/tls (made per run directory)\n"
            "ssl = on\n"
            f"ssl_cert_file = '{self.tls_dir / 'server.crt'}'\n"
            f"ssl_key_file = '{self.tls_dir / 'server.key'}'\n"
        )
        hba = self.data / "pg_hba.conf"
        wanted_hba = (
            "# outbox local stack: the superuser postgres logs in without a password (development only, loopback\n"
            "# only); every other role needs its password (SCRAM), over TLS or not.\n"
            "local   all          all                      trust\n"
            "host    all          postgres  127.0.0.1/32   trust\n"
            "host    all          postgres  ::1/128        trust\n"
            "host    all          all       127.0.0.1/32   scram-sha-256\n"
            "host    all          all       ::1/128        scram-sha-256\n"
            "local   replication  all                      trust\n"
            "host    replication  all       127.0.0.1/32   trust\n"
        )
        changed = False
        for path, wanted in ((tls_conf, wanted_conf), (hba, wanted_hba)):
            if not path.exists() or path.read_text() != wanted:
                path.write_text(wanted)
                self._chown(path)
                changed = True
        conf = self.data / "postgresql.conf"
        include = "include_if_exists = 'outbox_tls.conf'\n"
        if include not in conf.read_text():
            with open(conf, "a") as handle:
                handle.write(include)
            changed = True
        return changed

    def _tls_on(self) -> bool:
        import psycopg

        with psycopg.connect(host=HOST, port=self.port, user="postgres", dbname="postgres", sslmode="verify-full",
                             sslrootcert=str(self.ca_file), connect_timeout=5) as conn:
            row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
            return bool(row and row[0])

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(host=HOST, port=self.port, user="postgres", dbname="postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')

    def down(self, mode: str = "fast") -> None:
        if not (self.data / "PG_VERSION").exists() or read_pid(self.data / "postmaster.pid") is None:
            return
        subprocess.run(
            as_pg_user([str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
            capture_output=True,
            check=False,
        )

    def restart(self) -> None:
        self.down()
        self.up()


# --------------------------------------------------------------------------------------------- commands


def write_env(cluster: KafkaCluster, pg: Postgres) -> Path:
    """`.run/stack.env`; a secured cluster adds its client settings and role users (file mode 0600 then)."""
    env_file = RUN / "stack.env"
    lines = {
        **cluster.client_env(),
        "KAFKA_BROKERS": str(cluster.brokers),
        "OUTBOX_DB_URL": pg.url,
        "OUTBOX_PG_ADMIN_URL": pg.admin_url,
        "OUTBOX_PG_SSLROOTCERT": str(pg.ca_file),
        "SPARK_JARS_DIR": str(JARS / "spark"),
        "PROJECTIONS_LAKE_PATH": str(RUN / "lake"),
    }
    if cluster.secure:
        kafka_security().write_env_file(env_file, lines)
    else:
        env_file.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
    return env_file


def cmd_up(args: argparse.Namespace) -> None:
    with stack_lock():
        if not args.no_spark_jars:
            ensure_jars("spark")
        pg = Postgres()
        if not args.no_postgres:
            pg.up()
        cluster = KafkaCluster(MAIN_CLUSTER, args.brokers, MAIN_KAFKA_PORT, secure=args.secure)
        cluster.up()
        env_file = write_env(cluster, pg)
        log(f"stack is up; settings in {env_file}")


def all_clusters() -> list[KafkaCluster]:
    found = []
    for path in sorted(RUN.glob("*/cluster.json")):
        cluster = KafkaCluster.load(path.parent.name)
        if cluster is not None:
            found.append(cluster)
    return found


def cmd_down(_: argparse.Namespace) -> None:
    with stack_lock():
        from connect import stop_all  # Kafka Connect workers (ops/connect.py) are the brokers' clients: first

        stop_all()
        for cluster in all_clusters():
            if cluster.any_running():
                log(f"stopping Kafka {cluster.name}")
            cluster.down()
        pg = Postgres()
        if pg.running():
            log("stopping PostgreSQL")
        pg.down()
        log("stack is down")


def cmd_status(_: argparse.Namespace) -> None:
    pg = Postgres()
    print(f"postgresql  {'up' if pg.running() else 'down':5} {pg.url}")
    for cluster in all_clusters():
        for node in cluster.nodes:
            state = "up" if cluster.node_running(node) else "down"
            port = cluster.controller_port if node == 0 else cluster.client_port(node)
            role = "controller" if node == 0 else "broker"
            print(f"{cluster.name}-{node:<6} {state:5} {HOST}:{port} {role}")


def cmd_kafka_up(args: argparse.Namespace) -> None:
    with stack_lock():
        KafkaCluster(args.cluster, args.brokers, args.port, secure=args.secure).up()


def cmd_kafka_down(args: argparse.Namespace) -> None:
    with stack_lock():
        cluster = KafkaCluster.load(args.cluster)
        if cluster is not None:
            cluster.down()
            if args.remove:
                shutil.rmtree(cluster.home, ignore_errors=True)


def _cluster(name: str) -> KafkaCluster:
    cluster = KafkaCluster.load(name)
    if cluster is None:
        raise StackError(f"no Kafka cluster named {name!r} under {RUN}; start it with kafka-up first")
    return cluster


def cmd_broker_stop(args: argparse.Namespace) -> None:
    _cluster(args.cluster).stop_node(args.node, kill=args.kill)


def cmd_broker_start(args: argparse.Namespace) -> None:
    cluster = _cluster(args.cluster)
    cluster.start_node(args.node)
    if args.wait:
        cluster.wait_ready(nodes=[args.node])


def cmd_pg_restart(_: argparse.Namespace) -> None:
    Postgres().restart()


def cmd_pg_up(_: argparse.Namespace) -> None:
    with stack_lock():
        Postgres().up()


def cmd_pg_down(_: argparse.Namespace) -> None:
    with stack_lock():
        Postgres().down()


def cmd_jars(args: argparse.Namespace) -> None:
    for which in args.which:
        print(ensure_jars(which))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start PostgreSQL and the Kafka cluster, wait until they answer")
    up.add_argument("--brokers", type=int, default=int(os.environ.get("BROKERS", "1")), choices=[1, 3])
    up.add_argument("--no-spark-jars", action="store_true", help="skip resolving the Spark connector jars")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL (SCRAM-SHA-512), TLS made per run, ACLs; client settings in .run/stack.env")
    up.add_argument("--no-postgres", action="store_true", help="start only Kafka (the demo's outbox is SQLite)")
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop every process the stack started").set_defaults(func=cmd_down)
    sub.add_parser("status", help="show what runs").set_defaults(func=cmd_status)
    kup = sub.add_parser("kafka-up", help="start an extra named Kafka cluster (tests)")
    kup.add_argument("--cluster", required=True)
    kup.add_argument("--brokers", type=int, default=3)
    kup.add_argument("--port", type=int, required=True)
    kup.add_argument("--secure", action="store_true", help="SASL_SSL, TLS and ACLs (see --help of up)")
    kup.set_defaults(func=cmd_kafka_up)
    kdown = sub.add_parser("kafka-down", help="stop a named Kafka cluster")
    kdown.add_argument("--cluster", required=True)
    kdown.add_argument("--remove", action="store_true", help="also delete its data, keys and passwords")
    kdown.set_defaults(func=cmd_kafka_down)
    bstop = sub.add_parser("broker-stop", help="stop one broker of a cluster (SIGTERM, or SIGKILL with --kill)")
    bstop.add_argument("--cluster", default=MAIN_CLUSTER)
    bstop.add_argument("--node", type=int, required=True)
    bstop.add_argument("--kill", action="store_true")
    bstop.set_defaults(func=cmd_broker_stop)
    bstart = sub.add_parser("broker-start", help="start one broker of a cluster again")
    bstart.add_argument("--cluster", default=MAIN_CLUSTER)
    bstart.add_argument("--node", type=int, required=True)
    bstart.add_argument("--wait", action="store_true")
    bstart.set_defaults(func=cmd_broker_start)
    sub.add_parser("pg-restart", help="restart PostgreSQL (fault tests)").set_defaults(func=cmd_pg_restart)
    sub.add_parser("pg-up", help="start only PostgreSQL (with TLS), wait until it answers").set_defaults(func=cmd_pg_up)
    sub.add_parser("pg-down", help="stop only PostgreSQL").set_defaults(func=cmd_pg_down)
    jars = sub.add_parser("jars", help="resolve JVM jars through Maven into .cache/jars")
    jars.add_argument("which", nargs="+", choices=["kafka", "spark"])
    jars.set_defaults(func=cmd_jars)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except StackError as exc:
        print(f"[stack] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
