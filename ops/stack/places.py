"""Where the local stack lives: the run directory, the jar cache, loopback and the ports.

Everything is under the repository root (`.run/` for data, logs and pid files, `.cache/jars/` for the JVM
jars); the environment can move the run directory, the ports and the brokers' heap.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
REGISTRY_PORT = int(os.environ.get("OUTBOX_REGISTRY_PORT", "28081"))
KAFKA_HEAP = os.environ.get("OUTBOX_KAFKA_HEAP", "-Xms128m -Xmx512m")
