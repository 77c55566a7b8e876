"""kill -9 of `outbox-bridge run` at random moments, 22 times, during a 200,000-event publish on
PostgreSQL: at the end every event is in Kafka, and the duplicates stay within the design's bound.

The bound, per crash: a restart resumes after the persisted watermark W, so what it sends again is at
most what lay between W and the reader's position at the crash, i.e. the events in flight (at most
`max_in_flight`) plus those acknowledged since the last persist (at most one persist interval's worth,
measured here as the largest step of the persisted watermark the test saw). In total:
duplicates <= crashes * (max_in_flight + largest persisted step).
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from functools import partial

import pytest
from sqlalchemy import create_engine, text

from bridge.migrate import upgrade
from tests.support import bridge_env, read_offsets, read_topic, record_seq, spawn_bridge, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EVENTS = 200_000
KILLS = 22
MAX_IN_FLIGHT = 2000
# Short, so the persisted watermark moves several times within each run: at 0.2 s a bridge that publishes
# 100,000 events/s (an idle machine) was killed before its first persist in most runs, and the kills did not
# land at different points of the publish.
PERSIST_INTERVAL_S = 0.05
LEASE_TIMEOUT_S = 1  # the smallest allowed: each restart waits for the dead leader's lease to expire
#: Events after the last kill point: between seeing the persisted watermark and the kill (a 20 ms poll, a persist
#: interval behind) a bridge at 150,000 events/s publishes about 10,000.
RESERVE = 30_000
#: How long a run may take to reach its kill point before it is killed anyway.
TARGET_WAIT_S = 30


def _insert_backlog(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
            "SELECT 'e-' || g, 'order', 'a-' || (g % 500), 'OrderPlaced', '{\"n\": ' || g || '}' "
            "FROM generate_series(1, :n) AS g"), {"n": EVENTS})
    engine.dispose()


def _leads(url: str, name: str, pid: int) -> bool:
    row = read_offsets(url, name)
    return row is not None and f":{pid}:" in (row.owner or "")


def test_kill9_at_random_moments_loses_nothing_and_bounds_duplicates(
    postgres_url, kafka_bootstrap, tmp_path, capsys
) -> None:
    url = postgres_url
    upgrade(url)
    _insert_backlog(url)
    name = f"k9-{uuid.uuid4().hex[:8]}"
    template = f"k9{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    env = bridge_env(url, kafka_bootstrap, name, template, max_in_flight=MAX_IN_FLIGHT,
                     persist_interval_s=PERSIST_INTERVAL_S, lease_timeout_s=LEASE_TIMEOUT_S, topic_partitions=3)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    log = tmp_path / "bridge.log"
    watermarks_at_kill: list[int] = []
    largest_step = 0
    started = time.monotonic()

    for crash in range(KILLS):
        bridge = spawn_bridge(env, log)
        try:
            wait_until(partial(_leads, url, name, bridge.pid), 30, f"run {crash} to take the lease")
            row = read_offsets(url, name)
            assert row is not None
            before = last = row.watermark
            # The kill comes once the persisted watermark passes a random point of this run's share of what is
            # left. Chosen by progress, not by a delay, so a faster bridge cannot finish before the last kills;
            # RESERVE stays untargeted for what it publishes between the watermark seen and the kill.
            target = before + rng.uniform(0, (EVENTS - RESERVE - before) / (KILLS - crash + 1))
            deadline = time.monotonic() + TARGET_WAIT_S
            while last < target and time.monotonic() < deadline:
                time.sleep(0.02)
                current = read_offsets(url, name)
                if current is not None and current.watermark != last:
                    largest_step = max(largest_step, current.watermark - last)
                    last = current.watermark
            bridge.kill()
        finally:
            bridge.stop_if_running()
        after = read_offsets(url, name)
        assert after is not None
        watermarks_at_kill.append(after.watermark)
        assert after.watermark < EVENTS, f"kill {crash + 1} came after the publish had finished; raise RESERVE"

    bridge = spawn_bridge(env, log)
    try:
        wait_until(lambda: (row := read_offsets(url, name)) is not None and row.watermark == EVENTS, 180,
                   "the last run to publish everything")
        bridge.signal(15)
        assert bridge.wait(60) == 0
    finally:
        bridge.stop_if_running()
    elapsed = time.monotonic() - started

    records = read_topic(kafka_bootstrap, template.replace("{aggregate_type}", "order"))
    counts = Counter(record_seq(m) for m in records)
    distinct = set(counts)
    duplicates = sum(counts.values()) - len(distinct)
    per_crash = MAX_IN_FLIGHT + largest_step
    bound = KILLS * per_crash
    with capsys.disabled():  # shown in every run, not only with -s
        print(f"\nkill -9 test, seed {seed}: {KILLS} kills in {elapsed:.1f}s, watermark at each kill "
              f"{watermarks_at_kill}")
        print(f"records in Kafka {sum(counts.values())}, distinct {len(distinct)}, DUPLICATES {duplicates}; bound "
              f"{KILLS} crashes * ({MAX_IN_FLIGHT} max in flight + {largest_step} largest persisted step) = {bound}")

    assert distinct == set(range(1, EVENTS + 1)), f"missing seqs: {sorted(set(range(1, EVENTS + 1)) - distinct)[:20]}"
    assert duplicates <= bound
    # And where they are: a crash re-sends only just above the watermark it had persisted.
    stray = [seq for seq, n in counts.items() if n > 1
             and not any(w < seq <= w + per_crash for w in watermarks_at_kill)]
    assert not stray, f"duplicates far above every crash's persisted watermark: {sorted(stray)[:20]}"
    assert len(set(watermarks_at_kill)) > KILLS // 2, "the kills landed at different points of the publish"
