"""A rewind in exactly-once delivery (`outbox-bridge replay --from-seq N` while the bridge runs) is a deliberate
re-send: a read_committed consumer sees every event from N on exactly once more, each aggregate's copies in seq
order after the first ones, and nothing before N again, even with the bridge killed (kill -9) as soon as it logs
that it lowered Kafka's progress for the rewind. Where exactly the kill lands (before or after the lower watermark is
stored, before or after the first re-sent transaction commits) is up to the scheduler; the unit tests
(`tests/unit/bridge/daemon/test_exactly_once.py`) take each of those orders on purpose."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest

from bridge.migrate import upgrade
from tests.support import (
    BRIDGE_SCRIPT,
    bridge_env,
    head_seq,
    insert_events,
    keys_in_seq_order,
    persisted_watermark,
    read_topic,
    record_seq,
    spawn_bridge,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

EVENTS = 1000
FROM_SEQ = 401
REWINDING = "rewinding: Kafka's progress lowered first, what follows is sent again on purpose"


def test_a_replay_is_seen_once_more_by_read_committed_consumers_through_a_kill_after_the_mark(
        postgres_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    url = postgres_url
    upgrade(url)
    insert_events(url, EVENTS)
    name = f"eor-{uuid.uuid4().hex[:6]}"
    template = f"eor{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    topic = template.replace("{aggregate_type}", "order")
    env = bridge_env(url, kafka_bootstrap, name, template, delivery="exactly-once", transaction_interval_ms=100,
                     persist_interval_s=0.2, lease_timeout_s=2, topic_partitions=3)
    log = tmp_path / "bridge.log"
    bridge = spawn_bridge(env, log)
    replay: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: persisted_watermark(url, name) == EVENTS, 60, f"the first {EVENTS} events")
        replay = subprocess.Popen([str(BRIDGE_SCRIPT), "replay", "--from-seq", str(FROM_SEQ), "--yes", "--json",
                                   "--reason", "test", "--wait", "60"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        wait_until(lambda: bridge.logged(REWINDING), 30, "the leader to lower Kafka's progress for the rewind")
        bridge.kill()
        restarted = spawn_bridge(env, log)
        try:
            out, err = replay.communicate(timeout=90)
            assert replay.returncode == 0, err
            assert json.loads(out)["audit_id"], out  # exit 0: applied by a leader
            wait_until(lambda: persisted_watermark(url, name) == head_seq(url), 60, "the re-send to catch up")
            restarted.signal(15)
            assert restarted.wait(30) == 0
        finally:
            restarted.stop_if_running()
    finally:
        bridge.stop_if_running()
        if replay is not None and replay.poll() is None:
            replay.kill()

    records = read_topic(kafka_bootstrap, topic, isolation_level="read_committed")
    counts = Counter(record_seq(m) for m in records)
    rewinds = sum(line.get("msg") == REWINDING for line in restarted.log_lines())  # both processes' lines
    print(f"\nexactly-once replay from {FROM_SEQ} with a kill after the mark: {len(records)} records read_committed; "
          f"rewind lines logged {rewinds} (one per leader that lowered Kafka's progress: 2 if the kill came before "
          f"the request was stored as applied)")
    assert counts == Counter({seq: 1 if seq < FROM_SEQ else 2 for seq in range(1, EVENTS + 1)}), \
        "everything before the replay once, everything from it exactly twice"
    for key, seqs in keys_in_seq_order(records).items():
        turn = next((i for i in range(1, len(seqs)) if seqs[i] < seqs[i - 1]), len(seqs))
        first, again = seqs[:turn], seqs[turn:]
        assert first == sorted(first) and again == sorted(again) and min(again) >= FROM_SEQ, \
            f"aggregate {key!r}: the replayed copies follow the first ones, each in seq order: {seqs}"
