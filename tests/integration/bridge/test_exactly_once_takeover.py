"""Exactly-once delivery through a takeover from a frozen leader: nothing the old leader had queued becomes visible
to a `read_committed` consumer, and the old leader, woken, exits with a "fenced" line and exit code 11.

Two `outbox-bridge run` processes with BRIDGE_DELIVERY=exactly-once share one bridge name (so one transactional.id)
and reach a private broker only through `tests.kafkaproxy`, which holds every Produce response for a while: the
leader's transaction stays open with records appended and more queued in librdkafka. The leader is frozen
(SIGSTOP) there; the standby takes the lease when it runs out, and its producer's `init_transactions` fences the
old one, so the broker aborts the open transaction; the standby resumes after the last seq Kafka committed and
publishes. The old leader is woken (SIGCONT) and the throttle lifted: what it still had queued is refused by the
broker (an old producer epoch), and it exits. A plain consumer then reads the topic, read_committed and
read_uncommitted. The at-least-once counterpart, where such records do land as duplicates, is
`test_takeover_order.py`.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from bridge.exits import EXIT_FENCED
from bridge.migrate import upgrade
from tests.proxiedbroker import ProxiedBroker
from tests.support import (
    BridgeProcess,
    Ledger,
    bridge_env,
    committed_seqs,
    head_seq,
    keys_in_seq_order,
    read_topic,
    record_seq,
    spawn_bridge,
    wait_until,
    write_out_of_seq_order,
)
from tests.takeover import OffsetsWatch, create_topic, leader_and_standby, pile_up, produced_by, warm_transactions
from tests.takeover import queued as queued_by

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LEASE_TIMEOUT_S = 3.0
THROTTLE_S = 1.0
AGGREGATES = 8
BACKLOG = 800
WRITERS = 6
#: The leader is frozen only with at least this many events handed to librdkafka and not yet at the broker.
MIN_QUEUED = 200
FIRST, SECOND = "eos-takeover-first", "eos-takeover-second"


def _spawn(url: str, bootstrap: str, name: str, template: str, client_id: str, log: Path) -> BridgeProcess:
    extra = {"client.id": client_id, "batch.num.messages": 10}
    env = bridge_env(url, bootstrap, name, template, delivery="exactly-once", transaction_max_events=1000,
                     transaction_interval_ms=100, persist_interval_s=0.2, lease_timeout_s=LEASE_TIMEOUT_S,
                     topic_partitions=3, max_in_flight=2000, producer_extra=json.dumps(extra))
    return spawn_bridge(env, log)


def test_a_frozen_leaders_queued_sends_never_become_visible_and_it_exits_fenced(
    postgres_url: str, proxied_kafka: ProxiedBroker, tmp_path: Path
) -> None:
    url = postgres_url
    upgrade(url)
    proxy = proxied_kafka.proxy
    proxy.reset()
    bootstrap = proxied_kafka.bootstrap
    name = f"eot-{uuid.uuid4().hex[:6]}"
    template = f"eot{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    topic = template.replace("{aggregate_type}", "order")
    create_topic(bootstrap, topic)
    warm_transactions(bootstrap)
    ledgers: list[Ledger] = []

    with OffsetsWatch(url, name) as watch:
        first, second = leader_and_standby(
            watch, lambda client_id, log: _spawn(url, bootstrap, name, template, client_id, log), (FIRST, SECOND),
            tmp_path)
        try:
            # 1. The broker holds Produce responses; the leader's open transaction grows and its queue fills.
            ledgers.append(pile_up(url, proxy, THROTTLE_S, BACKLOG, WRITERS, AGGREGATES))

            def queued() -> int:
                return queued_by(watch, proxy, first, FIRST)

            wait_until(lambda: queued() >= MIN_QUEUED, 30, f"the leader to have {MIN_QUEUED} events queued")
            # 2. Frozen with sends queued and a transaction open.
            first.signal(signal.SIGSTOP)
            paused_at = time.monotonic()
            queued_at_pause, last_of_first = queued(), watch.last_of(first.pid)
            head_at_pause = head_seq(url)
            # 3. Writers go on; the standby takes over when the lease runs out (fencing the old producer).
            ledgers.append(write_out_of_seq_order(url, WRITERS, 2.0, AGGREGATES))
            wait_until(lambda: (s := watch.latest()) is not None and s.owner_pid == second.pid, LEASE_TIMEOUT_S + 15,
                       "the standby to take over")
            proxy.throttle(0)
            wait_until(lambda: watch.watermark() >= head_at_pause, 60,
                       f"the new leader to publish past the head at the freeze, {head_at_pause}")
            # 4. The old leader is woken, its queue still full.
            first.signal(signal.SIGCONT)
            resumed_at = time.monotonic()
            first_code = first.wait(30)
            sent_by_old_after_resume = produced_by(proxy, FIRST, after=resumed_at)
            # 5. More events; the new leader publishes them all, then stops.
            ledgers.append(write_out_of_seq_order(url, WRITERS, 1.0, AGGREGATES))
            head = head_seq(url)
            wait_until(lambda: watch.watermark() >= head, 60, f"the new leader to persist the head seq {head}")
            second.signal(signal.SIGTERM)
            second_code = second.wait(60)
        finally:
            first.stop_if_running()
            second.stop_if_running()
            proxy.throttle(0)

    records = read_topic(bootstrap, topic, isolation_level="read_committed")
    everything = read_topic(bootstrap, topic, isolation_level="read_uncommitted")
    counts = Counter(record_seq(m) for m in records)
    committed = set(committed_seqs(url))
    aborted = Counter(record_seq(m) for m in everything) - counts
    fenced = [line for line in first.log_lines() if line.get("msg", "").startswith("fenced: another instance leads")]
    # The woken old leader may have had an init_transactions of its own under way (a producer rebuilt after a
    # commit outlasted its timeout under the throttle); finishing, it fences the new leader's producer, which
    # keeps the lease and fences it back.
    fenced_back = sum(line.get("msg", "").startswith("fenced by a producer of an instance that no longer leads")
                      for line in second.log_lines())
    print(f"\n[exactly-once takeover] {len(committed)} committed over {AGGREGATES} aggregates "
          f"({sum(ledger.late_commits() for ledger in ledgers)} late commits); frozen "
          f"{resumed_at - paused_at:.1f}s with {queued_at_pause} events queued (watermark "
          f"{last_of_first.watermark}); after SIGCONT the old leader got {sent_by_old_after_resume[1]} records to "
          f"the broker; read_committed {len(records)} records, read_uncommitted {len(everything)} "
          f"({sum(aborted.values())} of aborted transactions, seqs {min(aborted, default=None)}.."
          f"{max(aborted, default=None)}); old leader exit {first_code}, fenced line {fenced[:1]}; "
          f"the new leader fenced back a stale producer {fenced_back} times")

    # The scenario happened.
    assert not any(ledger.errors for ledger in ledgers), "a writer failed (and rolled back)"
    assert sum(ledger.late_commits() for ledger in ledgers) > 0, "some commits came after a higher seq's"
    assert queued_at_pause >= MIN_QUEUED, "the leader had sends queued when it was frozen"
    assert resumed_at - paused_at > LEASE_TIMEOUT_S, "the freeze outlasted the lease"
    assert aborted, "the old leader's open transaction reached the broker and was aborted"

    # The old leader stopped, saying why; the new one stopped cleanly.
    assert first_code == EXIT_FENCED, f"the fenced leader exits {EXIT_FENCED}, not {first_code}"
    assert len(fenced) == 1, "one line says it was fenced"
    assert second_code == 0

    # read_committed: every committed event exactly once, each aggregate in seq order; nothing the old leader
    # had queued (the new leader sent those seqs again) shows twice.
    missing = sorted(committed - set(counts))
    assert not missing, f"{len(missing)} committed events never became visible, first {missing[:10]}"
    assert set(counts) <= committed, "only committed events are published"
    duplicated = sorted(seq for seq, n in counts.items() if n > 1)
    assert not duplicated, f"{len(duplicated)} seqs visible twice, first {duplicated[:10]}"
    disordered = {key: seqs for key, seqs in keys_in_seq_order(records).items() if seqs != sorted(seqs)}
    assert not disordered, f"aggregates out of seq order: {list(disordered)[:5]}"
