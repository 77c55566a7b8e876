"""Kafka in KRaft mode as local processes: a named cluster of brokers (and a controller) on loopback ports.

`.run/<cluster>/` holds each node's `server.properties`, data and pid file, and `cluster.json`, from which
`down`, `status` and the fault commands find a cluster again. A `secure` cluster takes its TLS material,
passwords and client settings from `stack.kafka_security`.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stack import kafka_security
from stack.jars import ensure_jars
from stack.places import HOST, KAFKA_HEAP, ROOT, RUN
from stack.processes import StackError, log, pid_alive, pid_is_ours, port_open, read_pid, stop_pid, wait_for


@dataclass(frozen=True)
class KafkaCluster:
    """A KRaft cluster on consecutive loopback ports.

    One broker runs as a combined broker+controller. With more brokers a dedicated controller (node 0) runs
    beside brokers 1..N, so that killing brokers in fault tests never costs the controller quorum: the
    controller keeps electing leaders and shrinking ISRs, as it would in a production cluster.

    With `advertised_port`, broker N tells clients to connect to `advertised_port + N - 1` instead of the
    port it listens on: a test puts a proxy there so that every client connection goes through it.

    With `secure`, every listener is SASL_SSL (see `stack.kafka_security`) and clients need the settings in
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

    def tls(self) -> kafka_security.Tls:
        return kafka_security.Tls(self.home / "tls")

    def credentials(self) -> kafka_security.Credentials:
        return kafka_security.Credentials.load_or_make(self.home / "credentials.json")

    def admin_conf(self) -> dict[str, Any]:
        """librdkafka settings of an admin client: the super user on a secured cluster."""
        if not self.secure:
            return {"bootstrap.servers": self.bootstrap}
        return dict(kafka_security.admin_client_conf(self.bootstrap, self.tls(), self.credentials()))

    def client_env(self) -> dict[str, str]:
        if not self.secure:
            return {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}
        return dict(kafka_security.client_env(self.bootstrap, self.tls(), self.credentials()))

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
        return list(kafka_security.broker_properties(tls, creds, self.listener))

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
        scram = kafka_security.scram_format_args(self.credentials()) if self.secure else []
        # `--cluster-id=<id>`, not `-t <id>`: a base64url id may start with "-", which argparse takes for an option.
        cmd = self.java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(config), *scram,
                        node=node)
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StackError(f"formatting {self.name} node {node} failed:\n{result.stdout}\n{result.stderr}")

    def node_running(self, node: int) -> bool:
        pid = read_pid(self.pid_file(node))
        return pid is not None and pid_alive(pid) and pid_is_ours(pid, self.marker(node))

    def ports(self, node: int) -> list[int]:
        """The ports node `node` listens on: the controller's for node 0 (or a single broker), its client port."""
        if node == 0:
            return [self.controller_port]
        return [self.client_port(node)] + ([self.controller_port] if self.brokers == 1 else [])

    def start_node(self, node: int) -> None:
        if self.node_running(node):
            return
        for port in self.ports(node):
            # A node whose port is taken would exit at once and leave the wait for it to time out with a log
            # that names a bind failure at best: say which port, and that the process on it is not ours.
            if port_open(port):
                raise StackError(
                    f"Kafka {self.name} node {node} cannot start: port {port} on {HOST} is taken by a process this "
                    f"stack did not start (a stack left running by another checkout, or a killed test run's "
                    f"broker?). Find it with `ss -ltnp 'sport = :{port}'`, stop it, and start again."
                )
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
            kafka_security.provision(self.bootstrap, self.tls(), self.credentials())
            kafka_security.write_env_file(self.client_env_file, self.client_env())
            log(f"Kafka {self.name}: SASL_SSL ({kafka_security.MECHANISM}) with ACLs; users and CA in "
                f"{self.client_env_file}")
        log(f"Kafka {self.name} ready: {self.brokers} broker(s) at {self.bootstrap}")

    def any_running(self) -> bool:
        return any(self.node_running(n) for n in self.nodes)

    def down(self) -> None:
        # Brokers first, so they can shut down cleanly while the controller still answers.
        for node in sorted(self.nodes, reverse=True):
            self.stop_node(node)


def all_clusters() -> list[KafkaCluster]:
    found = []
    for path in sorted(RUN.glob("*/cluster.json")):
        cluster = KafkaCluster.load(path.parent.name)
        if cluster is not None:
            found.append(cluster)
    return found
