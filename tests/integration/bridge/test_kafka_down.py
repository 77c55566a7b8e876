"""With Kafka down, `outbox-bridge run` says so in one line naming the bootstrap servers and what to check,
and says it again only every 30 s, instead of librdkafka's "Connection refused" every second."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from bridge.migrate import upgrade
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def test_run_with_kafka_down_prints_one_clear_line_not_a_refusal_a_second(sqlite_url: str) -> None:
    upgrade(sqlite_url)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        bootstrap = f"127.0.0.1:{sock.getsockname()[1]}"  # nothing listens here once the socket closes
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRIDGE_", "OUTBOX_", "KAFKA_"))}
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli", "run", "--db-url", sqlite_url, "--bootstrap-servers", bootstrap,
         "--allow-single-broker", "--metrics-port", "0", "--plain-logs"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    try:
        time.sleep(8)  # librdkafka retries about once a second: several refusals in this time
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    reports = [line for line in err.splitlines() if "Kafka is unreachable" in line]
    assert len(reports) == 1, err
    assert bootstrap in reports[0] and "Connection refused" in reports[0] and "make up" in reports[0]
    assert "KAFKA_BOOTSTRAP_SERVERS" in reports[0]
    assert [line for line in err.splitlines() if "Connection refused" in line] == reports, err
