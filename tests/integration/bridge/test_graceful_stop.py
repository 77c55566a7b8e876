"""SIGTERM (or SIGINT) in the middle of a publish, then a restart, three times: each stop drains the
in-flight window, persists the watermark and exits 0, and each restart resumes after it, so every
event is in Kafka exactly once."""

from __future__ import annotations

import signal
import time
import uuid
from functools import partial

import pytest
from sqlalchemy import create_engine, text

from bridge.migrate import upgrade
from tests.support import bridge_env, read_offsets, read_topic, seq_counts, spawn_bridge, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

EVENTS = 200_000  # enough that three stops land mid-publish at 30,000+ events/s


def _watermark_above(url: str, name: str, seq: int) -> bool:
    row = read_offsets(url, name)
    return row is not None and row.watermark > seq


def test_sigterm_then_restart_publishes_no_duplicates(postgres_url, kafka_bootstrap, tmp_path) -> None:
    url = postgres_url
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
            "SELECT 'e-' || g, 'order', 'a-' || (g % 300), 'OrderPlaced', '{}' FROM generate_series(1, :n) g"),
            {"n": EVENTS})
    engine.dispose()
    name = f"gs-{uuid.uuid4().hex[:6]}"
    template = f"gs{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    env = bridge_env(url, kafka_bootstrap, name, template, persist_interval_s=0.5, max_in_flight=5000)
    log = tmp_path / "bridge.log"
    stopped_at: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
        bridge = spawn_bridge(env, log)
        try:
            start = read_offsets(url, name)
            wait_until(partial(_watermark_above, url, name, (start.watermark if start else 0) + 5000), 60,
                       "the bridge to be publishing")
            bridge.signal(signum)
            sent_at = time.monotonic()
            assert bridge.wait(60) == 0, f"{signal.Signals(signum).name} exits 0"
            stop_s = time.monotonic() - sent_at
        finally:
            bridge.stop_if_running()
        row = read_offsets(url, name)
        assert row is not None and row.owner is None, "the lease is released on a graceful stop"
        stopped_at.append(row.watermark)
        print(f"{signal.Signals(signum).name}: stopped in {stop_s:.2f}s at watermark {row.watermark}")
        assert row.watermark < EVENTS, "stopped in the middle of the publish"

    lines = [line for line in bridge.log_lines() if line.get("msg") == "stopping: waiting for in-flight deliveries"]
    assert len(lines) == 3 and any(line["unacked"] > 0 for line in lines), "stops happened with events in flight"

    bridge = spawn_bridge(env, log)
    try:
        wait_until(lambda: (row := read_offsets(url, name)) is not None and row.watermark == EVENTS, 120,
                   "the last run to publish everything")
        bridge.signal(signal.SIGTERM)
        assert bridge.wait(60) == 0
    finally:
        bridge.stop_if_running()

    counts = seq_counts(read_topic(kafka_bootstrap, template.replace("{aggregate_type}", "order")))
    duplicates = sum(counts.values()) - len(counts)
    print(f"stopped at {stopped_at}; {len(counts)} events in Kafka, {duplicates} duplicates")
    assert set(counts) == set(range(1, EVENTS + 1))
    assert duplicates == 0
