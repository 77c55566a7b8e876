"""Two `outbox-bridge run` processes with the same BRIDGE_NAME: one leads and publishes, the other
stands by; kill -9 the leader and the standby takes over within the lease timeout, losing nothing. A
leader paused (SIGSTOP) past its lease wakes up fenced: it cannot write the watermark, sends nothing,
and stands by."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from functools import partial

import pytest

from bridge.migrate import upgrade
from tests.support import (
    BridgeProcess,
    bridge_env,
    head_seq,
    insert_events,
    read_offsets,
    read_topic,
    seq_counts,
    spawn_bridge,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

LEASE_TIMEOUT_S = 3.0
# A standby checks the lease every max(0.2, lease/4) seconds; the leader's last renewal may be up to a
# persist interval before it died.
TAKEOVER_BOUND_S = LEASE_TIMEOUT_S + LEASE_TIMEOUT_S / 4 + 1.0


def _owner_pid(url: str, name: str) -> int | None:
    row = read_offsets(url, name)
    if row is None or not row.owner or row.lease_expires_at is None:
        return None
    return int(row.owner.split(":")[1])


def _leads(url: str, name: str, process: BridgeProcess) -> bool:
    return _owner_pid(url, name) == process.pid


def _pair(url: str, bootstrap: str, tmp_path, name: str) -> tuple[dict[str, str], str, BridgeProcess, BridgeProcess]:
    template = f"ha{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    env = bridge_env(url, bootstrap, name, template, persist_interval_s=0.2, lease_timeout_s=LEASE_TIMEOUT_S)
    first = spawn_bridge(env, tmp_path / "first.log")
    wait_until(partial(_leads, url, name, first), 30, "the first instance to lead")
    second = spawn_bridge(env, tmp_path / "second.log")
    wait_until(lambda: second.logged("another instance holds the lease; standing by"), 30,
               "the second instance to stand by")
    return env, template.replace("{aggregate_type}", "order"), first, second


def test_one_instance_publishes_the_other_takes_over_after_kill9(postgres_url, kafka_bootstrap, tmp_path) -> None:
    url = postgres_url
    upgrade(url)
    name = f"ha-{uuid.uuid4().hex[:6]}"
    insert_events(url, 1000)
    _, topic, first, second = _pair(url, kafka_bootstrap, tmp_path, name)
    try:
        wait_until(lambda: read_offsets(url, name).watermark == 1000, 60, "the leader to publish the backlog")
        # Both run for a while with events arriving: only the leader ever holds the lease.
        written = [1000]
        stop_writing = threading.Event()

        def write() -> None:
            while not stop_writing.is_set():
                insert_events(url, 20, start=written[0])
                written[0] += 20
                time.sleep(0.05)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert _owner_pid(url, name) == first.pid
            time.sleep(0.1)
        assert not second.logged("took the lease"), "the standby never led while the leader lived"

        first.kill()
        killed_at = time.monotonic()
        wait_until(partial(_leads, url, name, second), TAKEOVER_BOUND_S + 5, "the standby to take over")
        takeover_s = time.monotonic() - killed_at
        time.sleep(1)
        stop_writing.set()
        writer.join(10)
        target = head_seq(url)
        wait_until(lambda: read_offsets(url, name).watermark == target, 60, "the new leader to catch up")
        second.signal(signal.SIGTERM)
        assert second.wait(60) == 0
    finally:
        first.stop_if_running()
        second.stop_if_running()
    counts = seq_counts(read_topic(kafka_bootstrap, topic))
    print(f"\ntakeover {takeover_s:.2f}s after kill -9 (lease {LEASE_TIMEOUT_S}s, bound {TAKEOVER_BOUND_S}s); "
          f"{len(counts)} events, {sum(counts.values()) - len(counts)} duplicates")
    assert takeover_s <= TAKEOVER_BOUND_S
    assert set(counts) == set(range(1, target + 1)), "nothing lost across the takeover"


def test_a_paused_leader_wakes_up_fenced_and_cannot_write_the_watermark(
    postgres_url, kafka_bootstrap, tmp_path
) -> None:
    url = postgres_url
    upgrade(url)
    name = f"ha-{uuid.uuid4().hex[:6]}"
    insert_events(url, 500)
    _, topic, first, second = _pair(url, kafka_bootstrap, tmp_path, name)
    try:
        wait_until(lambda: read_offsets(url, name).watermark == 500, 60, "the leader to publish the backlog")
        old = read_offsets(url, name)
        assert old is not None
        first.signal(signal.SIGSTOP)  # a GC pause, a frozen VM: the process is alive but silent
        wait_until(partial(_leads, url, name, second), TAKEOVER_BOUND_S + 5, "the standby to take over")
        insert_events(url, 500, start=500)
        wait_until(lambda: read_offsets(url, name).watermark == 1000, 60, "the new leader to publish")
        taken = read_offsets(url, name)
        assert taken is not None and taken.epoch > old.epoch

        first.signal(signal.SIGCONT)
        insert_events(url, 200, start=1000)
        wait_until(lambda: first.logged("lost the lease; standing by"), 30, "the old leader to find itself fenced")
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            row = read_offsets(url, name)
            assert row is not None
            assert _owner_pid(url, name) == second.pid and row.epoch == taken.epoch
            assert f":{first.pid}:" not in str(row.status.get("instance")), "the fenced leader wrote the row"
            time.sleep(0.1)
        wait_until(lambda: read_offsets(url, name).watermark == 1200, 60, "the new leader to go on publishing")
        assert first.alive(), "the fenced instance stays as a standby"
    finally:
        first.stop_if_running()
        second.stop_if_running()
    counts = seq_counts(read_topic(kafka_bootstrap, topic))
    assert set(counts) == set(range(1, 1201))
    # It renewed (and failed to renew) its lease before reading anything: it sent nothing on waking.
    assert sum(counts.values()) == 1200, f"{sum(counts.values()) - 1200} duplicates"
