"""What a result was measured on: the machine, its load, and the versions of everything in the path."""

from __future__ import annotations

import glob
import os
import platform
import re
import sqlite3
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench.stack import ROOT, pg_dsn


def machine() -> dict[str, Any]:
    model = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.MULTILINE)
        model = found.group(1).strip() if found else model
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": model,
        "kernel": platform.release(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _kafka_broker_version() -> str | None:
    jars = glob.glob(str(ROOT / ".cache" / "jars" / "kafka" / "kafka-server-*.jar"))
    found = re.search(r"kafka-server-(.+)\.jar$", jars[0]) if jars else None
    return found.group(1) if found else None


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip()


def settings() -> dict[str, Any]:
    """The bridge's defaults (what every benchmark runs with unless it says otherwise) and the Spark setup."""
    from bridge.config import BridgeConfig

    defaults = BridgeConfig()
    names = ("max_in_flight", "max_in_flight_bytes", "read_batch_size", "persist_interval_s", "poll_interval_min_ms",
             "poll_interval_max_ms", "lease_timeout_s", "linger_ms", "batch_size", "compression",
             "delivery_timeout_ms")
    return {
        "bridge_defaults": {name: str(getattr(defaults, name)) for name in names},
        "topic_partitions": 6,
        "spark": {"master": "local[2]", "driver_memory": "2g", "shuffle_partitions": 4},
    }


def versions() -> dict[str, Any]:
    import confluent_kafka

    try:
        with psycopg.connect(pg_dsn("postgres"), connect_timeout=5) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            postgres = row[0] if row else None
    except psycopg.Error:
        postgres = None
    return {
        "python": sys.version.split()[0],
        "confluent_kafka": _version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka_broker": _kafka_broker_version(),
        "postgresql": postgres,
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": _version("SQLAlchemy"),
        "psycopg": _version("psycopg"),
        "pyspark": _version("pyspark"),
        "delta_spark": _version("delta-spark"),
        "py_spy": _version("py-spy"),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        # Other work in progress in the shared tree, if any: the measured code is the commit plus these.
        "uncommitted_in_bridge_or_projections": _git("status", "--porcelain", "bridge", "projections").splitlines(),
    }
