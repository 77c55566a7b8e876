"""A rewind requested while the bridge runs (`outbox-bridge replay --from-seq N`, which records a pending
request in bridge_replay_audit): the running leader picks it up, and every event from N on is
published again, nothing before N is sent again, events written meanwhile are published, and the
request is marked applied."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
from sqlalchemy import create_engine, select

from bridge.migrate import upgrade
from bridge.schema import bridge_replay_audit
from tests.support import (
    BRIDGE_SCRIPT,
    bridge_config,
    bridge_env,
    head_seq,
    insert_events,
    keys_in_seq_order,
    persisted_watermark,
    read_offsets,
    read_topic,
    seq_counts,
    start_bridge,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

FROM_SEQ = 401


def test_rewind_while_running_republishes_from_n_and_only_from_n(postgres_url, kafka_bootstrap) -> None:
    url = postgres_url
    upgrade(url)
    insert_events(url, 1000)
    config = bridge_config(url, kafka_bootstrap, persist_interval_s=0.2)
    bridge = start_bridge(config)
    writing = threading.Event()
    try:
        wait_until(lambda: persisted_watermark(url, config.bridge_name) == 1000, 60, "the first 1000 events")
        epoch = read_offsets(url, config.bridge_name).epoch

        def write() -> None:  # the application goes on writing while the rewind happens
            for batch in range(10):
                insert_events(url, 20, start=1000 + 20 * batch)
                time.sleep(0.1)
            writing.set()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        env = bridge_env(url, kafka_bootstrap, config.bridge_name, config.topic_template)
        started = time.monotonic()
        replay = subprocess.run([str(BRIDGE_SCRIPT), "replay", "--from-seq", str(FROM_SEQ), "--yes", "--json",
                                 "--reason", "test", "--wait", "30"],
                                env=env, capture_output=True, text=True, timeout=60, check=False)
        applied_s = time.monotonic() - started
        assert replay.returncode == 0, replay.stderr
        result = json.loads(replay.stdout)
        writer.join(30)
        assert writing.is_set()
        target = head_seq(url)
        wait_until(lambda: persisted_watermark(url, config.bridge_name) == target, 60,
                   "the bridge to re-publish and catch up")
        daemon = bridge.daemon
        assert bridge.stop() == 0
    finally:
        if bridge.thread.is_alive():
            bridge.stop()

    engine = create_engine(url)
    with engine.connect() as conn:
        audit = conn.execute(select(bridge_replay_audit)).one()
    engine.dispose()
    assert audit.id == result["audit_id"] and audit.mode == "rewind" and audit.from_seq == FROM_SEQ
    assert audit.status == "applied" and audit.applied_at is not None
    assert daemon.rewinds_applied == 1
    assert read_offsets(url, config.bridge_name).epoch == epoch, "applied by the running leader, not a takeover"

    records = read_topic(kafka_bootstrap, config.topic_for("order"))
    counts = seq_counts(records)
    print(f"\nrewind to {FROM_SEQ} applied in {applied_s:.2f}s; {sum(counts.values())} records for {target} events")
    assert set(counts) == set(range(1, target + 1))
    assert all(counts[seq] == 1 for seq in range(1, FROM_SEQ)), "nothing before N is sent again"
    assert all(counts[seq] == 2 for seq in range(FROM_SEQ, 1001)), "every event from N on is sent again"
    # Events written during the rewind: once, or twice if published before the rewind took effect.
    assert all(counts[seq] in (1, 2) for seq in range(1001, target + 1))
    for key, seqs in keys_in_seq_order(records).items():
        replay_start = next(i for i in range(1, len(seqs)) if seqs[i] <= seqs[i - 1])
        first, again = seqs[:replay_start], seqs[replay_start:]
        assert first == sorted(first) and again == sorted(again), f"{key!r}: each pass in seq order"
        assert again[0] >= FROM_SEQ
