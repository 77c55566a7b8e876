"""A real Prometheus server (Debian's package) scrapes a running bridge and a metric comes back."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from bridge.http import serve
from bridge.migrate import upgrade
from tests.support import bridge_config, insert_events, start_bridge, wait_until


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.request.quote(expr)}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())["data"]["result"]


def test_prometheus_scrapes_the_bridge(tmp_path: Path, sqlite_url, kafka_bootstrap) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the prometheus server is not installed: apt-get install prometheus (make test does this)")
    upgrade(sqlite_url)
    insert_events(sqlite_url, 25)
    bridge = start_bridge(bridge_config(sqlite_url, kafka_bootstrap))
    metrics_port, prom_port = _free_port(), _free_port()
    server = serve("127.0.0.1", metrics_port, bridge.daemon.metrics.registry, lambda: bridge.daemon.ready,
                   lambda: {})
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: outbox-bridge\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    prometheus = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 25, 60,
                   "the bridge to publish 25 events")

        def scraped() -> bool:
            try:
                result = _query(prom_port, 'outbox_watermark_seq{job="outbox-bridge"}')
            except OSError:
                return False
            return bool(result) and float(result[0]["value"][1]) == 25

        wait_until(scraped, 60, "Prometheus to scrape outbox_watermark_seq == 25")
        up = _query(prom_port, 'up{job="outbox-bridge"}')
        assert float(up[0]["value"][1]) == 1
        published = _query(prom_port, "sum(outbox_events_published_total)")
        assert float(published[0]["value"][1]) == 25
    finally:
        prometheus.terminate()
        prometheus.wait(30)
        server.shutdown()
        assert bridge.stop() == 0
