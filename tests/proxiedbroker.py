"""A private one-broker Kafka (KRaft) whose every client connection goes through a `KafkaFaultProxy`.

Kafka clients bootstrap at one address, then connect to the addresses the brokers advertise in their
metadata; a proxy in front of a shared broker would see only the bootstrap connection. This broker
listens on one loopback port and advertises the proxy's, so every connection, the bootstrap one too,
is the proxy's. It runs from the jars and java command of the stack's `KafkaCluster` (`ops/stack/kafka.py`),
with its data and log in a temporary directory that `stop` removes.
"""

from __future__ import annotations

import base64
import contextlib
import random
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.kafkaproxy import KafkaFaultProxy

ROOT = Path(__file__).resolve().parent.parent
#: Ports are chosen below the kernel's ephemeral range (32768-60999), so no client connection holds one
#: when the broker binds it; the controller listens 100 above the client port (KafkaCluster's rule).
PORTS = range(20_000, 32_000 - 100)
START_TIMEOUT_S = 90.0


def _kafka_cluster() -> type:
    """`KafkaCluster` of the stack package in ops/ (ops/ is scripts and that package, not on the path by default)."""
    ops = str(ROOT / "ops")
    if ops not in sys.path:
        sys.path.insert(0, ops)
    from stack.kafka import KafkaCluster

    return KafkaCluster


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_pair() -> int:
    """A client port that is free, and whose controller port (100 above) is free too."""
    for port in random.sample(PORTS, 200):
        if _free(port) and _free(port + 100):
            return port
    raise RuntimeError(f"no free pair of loopback ports found in {PORTS}")


@dataclass
class ProxiedBroker:
    """The broker's process and the proxy every client goes through; `bootstrap` is the proxy."""

    proxy: KafkaFaultProxy
    cluster: object  # a KafkaCluster of ops/stack/kafka.py, rooted in `root`
    root: Path
    started_in_s: float

    @property
    def bootstrap(self) -> str:
        return self.proxy.bootstrap

    def log_tail(self, lines: int = 30) -> str:
        path = self.root / "broker.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@contextlib.contextmanager
def proxied_broker(timeout_s: float = START_TIMEOUT_S) -> Iterator[ProxiedBroker]:
    """Start the proxy, then the broker behind it; stop both and remove the data however the block ends."""
    kafka_cluster = _kafka_cluster()
    root = Path(tempfile.mkdtemp(prefix="outbox-proxied-kafka-"))

    @dataclass(frozen=True)
    class PrivateCluster(kafka_cluster):  # type: ignore[valid-type,misc]
        """Data, pid file and log under `root`, not the shared stack's .run/."""

        @property
        def home(self) -> Path:
            return root / str(self.name)

        def log_file(self, node: int) -> Path:
            return root / "broker.log"

    port = _free_port_pair()
    proxy = KafkaFaultProxy(("127.0.0.1", port))
    started = time.monotonic()
    try:
        proxy.start()
        cluster = PrivateCluster(name="kafka", brokers=1, port=port, advertised_port=proxy.address[1])
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        cluster.format_node(1, cluster_id)
        cluster.start_node(1)
        cluster.wait_ready(timeout=timeout_s)
        yield ProxiedBroker(proxy, cluster, root, time.monotonic() - started)
    finally:
        try:
            # A throwaway broker: nothing to shut down cleanly for. The pid file says whether it started.
            PrivateCluster(name="kafka", brokers=1, port=port).stop_node(1, kill=True)
        finally:
            proxy.stop()
            shutil.rmtree(root, ignore_errors=True)
