"""A lease takeover while the paused leader has messages queued: nothing lost, each aggregate's first
deliveries in seq order, the old leader steps down, and the watermark never passes an unpublished seq.

Two `outbox-bridge run` processes share one bridge name and reach a private broker only through
`tests.kafkaproxy`, which throttles them: every Produce response is held for a while, as a broker holds
a client over its quota, so the leader's requests stay in flight and librdkafka's queue grows. Writers
commit out of seq order over a handful of aggregates. The leader is paused (SIGSTOP) with messages
queued; the standby takes over when the lease runs out and publishes; the old leader is resumed
(SIGCONT) and the throttle lifted. librdkafka sends some of what it had queued before Python learns of
the fence (the daemon then purges the rest): those records land after the new leader's, as duplicates
of events the new leader publishes too. A plain consumer (read_uncommitted) then reads the topic.

The proxy names each Produce request's client (each process has its own client.id) and counts its
records, so the test measures what the old leader still sent after it was resumed. The topic stamps
records with the broker's append time, so every persisted watermark seen during the run is checked
against when each event reached Kafka.

What the old leader sends after resuming there comes from librdkafka's queue, which the daemon cannot
stop once the process runs again; anything it produced itself would queue behind it and be purged. So a
second test pauses the leader where only the daemon's own check can stop it: between a read and its
sends (the database's answer to its read is held back by `tests.faultproxy` until it is paused).
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from bisect import bisect_right
from collections import Counter
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message
from sqlalchemy.engine import make_url

from bridge.migrate import upgrade
from tests.faultproxy import FaultProxy
from tests.proxiedbroker import ProxiedBroker
from tests.support import (
    BridgeProcess,
    Ledger,
    bridge_env,
    committed_seqs,
    head_seq,
    insert_events,
    keys_in_seq_order,
    read_topic,
    record_seq,
    spawn_bridge,
    wait_until,
    write_out_of_seq_order,
)
from tests.takeover import OffsetsWatch, create_topic, leader_and_standby, pile_up, produced_by
from tests.takeover import queued as queued_by

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

LEASE_TIMEOUT_S = 3.0
PERSIST_INTERVAL_S = 0.2
#: The in-flight window: what a takeover may duplicate at most (docs/OPERATIONS.md, "In-flight window").
MAX_IN_FLIGHT = 2000
#: Each Produce response is held this long: with 5 requests in flight per connection and small batches,
#: the leader gets about 5 * 3 partitions * BATCH_MESSAGES records acknowledged per THROTTLE_S.
THROTTLE_S = 1.0
BATCH_MESSAGES = 10
AGGREGATES = 8
BACKLOG = 800  # events committed at once, so the leader queues them all at once
WRITERS = 6
#: The leader is paused only with at least this many events handed to librdkafka and not yet sent.
MIN_QUEUED = 200
FIRST, SECOND = "takeover-first", "takeover-second"


def _spawn(url: str, bootstrap: str, name: str, template: str, client_id: str, log: Path) -> BridgeProcess:
    extra = {"client.id": client_id, "batch.num.messages": BATCH_MESSAGES}
    env = bridge_env(url, bootstrap, name, template, persist_interval_s=PERSIST_INTERVAL_S,
                     lease_timeout_s=LEASE_TIMEOUT_S, topic_partitions=3, max_in_flight=MAX_IN_FLIGHT,
                     producer_extra=json.dumps(extra))
    return spawn_bridge(env, log)


def _assert_whole(records: list[Message]) -> None:
    """Each partition was read whole from its first offset, nothing skipped (there are no transaction markers)."""
    by_partition: dict[int | None, list[int | None]] = {}
    for m in records:
        by_partition.setdefault(m.partition(), []).append(m.offset())
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets))), "each partition is read whole, in offset order"


def _took_over_at(process: BridgeProcess) -> dict[str, Any]:
    lines = [line for line in process.log_lines() if line.get("msg") == "took the lease"]
    assert len(lines) == 1, f"took the lease once: {lines}"
    return lines[0]


def test_after_a_takeover_from_a_leader_paused_with_messages_queued_a_plain_consumer_misses_nothing_and_sees_seq_order(
    postgres_url: str, proxied_kafka: ProxiedBroker, tmp_path: Path
) -> None:
    url = postgres_url
    upgrade(url)
    proxy = proxied_kafka.proxy
    proxy.reset()
    bootstrap = proxied_kafka.bootstrap
    name = f"to-{uuid.uuid4().hex[:6]}"
    template = f"to{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    topic = template.replace("{aggregate_type}", "order")
    create_topic(bootstrap, topic)
    ledgers: list[Ledger] = []

    with OffsetsWatch(url, name) as watch:
        first, second = leader_and_standby(
            watch, lambda client_id, log: _spawn(url, bootstrap, name, template, client_id, log), (FIRST, SECOND),
            tmp_path)
        try:
            # 1. The broker throttles; a backlog and out-of-order commits pile up in the leader's producer.
            ledgers.append(pile_up(url, proxy, THROTTLE_S, BACKLOG, WRITERS, AGGREGATES))

            def queued() -> int:
                return queued_by(watch, proxy, first, FIRST)

            wait_until(lambda: queued() >= MIN_QUEUED, 20, f"the leader to have {MIN_QUEUED} events queued")
            # 2. Paused with messages queued: a GC pause, a frozen VM.
            first.signal(signal.SIGSTOP)
            paused_at = time.monotonic()
            queued_at_pause, last_of_first = queued(), watch.last_of(first.pid)
            head_at_pause = head_seq(url)
            sent_before_pause = produced_by(proxy, FIRST)
            # 3. Writers go on; the standby takes over when the lease runs out, and publishes.
            ledgers.append(write_out_of_seq_order(url, WRITERS, 2.0, AGGREGATES))
            wait_until(lambda: (s := watch.latest()) is not None and s.owner_pid == second.pid, LEASE_TIMEOUT_S + 10,
                       "the standby to take over")
            wait_until(lambda: watch.watermark() > last_of_first.watermark, 20,
                       "the new leader to publish past the old leader's watermark")
            assert first.alive() and not first.logged("lost the lease; standing by")
            # 4. The old leader resumes, its queue still full; the throttle is lifted.
            first.signal(signal.SIGCONT)
            resumed_at = time.monotonic()
            proxy.throttle(0)
            paused_s = resumed_at - paused_at
            wait_until(lambda: first.logged("lost the lease; standing by"), 10, "the old leader to find itself fenced")
            sent_by_old_after_resume = produced_by(proxy, FIRST, after=resumed_at)
            # 5. More events while the old leader stands by; the new leader publishes them all.
            ledgers.append(write_out_of_seq_order(url, WRITERS, 1.0, AGGREGATES))
            head = head_seq(url)
            wait_until(lambda: watch.watermark() >= head, 60, f"the new leader to persist the head seq {head}")
            assert first.alive(), "the fenced instance stays, as a standby"
            sent_by_old_at_end = produced_by(proxy, FIRST, after=resumed_at)
            first.signal(signal.SIGTERM)
            second.signal(signal.SIGTERM)
            first_code, second_code = first.wait(30), second.wait(60)
        finally:
            first.stop_if_running()
            second.stop_if_running()
            proxy.throttle(0)

    records = read_topic(bootstrap, topic, isolation_level="read_uncommitted")
    _assert_whole(records)
    counts = Counter(record_seq(m) for m in records)
    committed = set(committed_seqs(url))
    takeover = _took_over_at(second)
    takeover_watermark = int(takeover["watermark"])
    duplicated = sorted(seq for seq, n in counts.items() if n > 1)
    landed_after_resume = sent_by_old_after_resume[1]
    old_lines = first.log_lines()
    closed = [line for line in old_lines if line.get("msg", "").startswith("producer closed with records unanswered")]
    print(f"\n[takeover] {len(committed)} committed over {AGGREGATES} aggregates "
          f"({sum(ledger.late_commits() for ledger in ledgers)} commits after a higher seq's); "
          f"paused {paused_s:.1f}s with {queued_at_pause} events queued in librdkafka (last status: watermark "
          f"{last_of_first.watermark}, in flight {last_of_first.status['in_flight']}; {sent_before_pause[1]} records "
          f"sent in {sent_before_pause[0]} requests before the pause, head {head_at_pause}); new leader took over at "
          f"watermark {takeover_watermark}; after SIGCONT the old leader sent {landed_after_resume} records in "
          f"{sent_by_old_after_resume[0]} requests, unanswered at close (at most) "
          f"{[c.get('unanswered_at_most') for c in closed]}; "
          f"{len(records)} records, {len(duplicated)} duplicated seqs (range "
          f"{duplicated[:1]}..{duplicated[-1:]}), {len(watch.samples)} watermark samples")

    # The scenario happened.
    assert not watch.errors, f"reading bridge_offsets failed: {watch.errors[:3]}"
    assert not any(ledger.errors for ledger in ledgers), "a writer failed (and rolled back)"
    assert sum(ledger.late_commits() for ledger in ledgers) > 0, "some commits came after a higher seq's"
    assert queued_at_pause >= MIN_QUEUED, "the leader had messages queued when it was paused"
    assert paused_s > LEASE_TIMEOUT_S, "the pause outlasted the lease"
    assert takeover["epoch"] > last_of_first.epoch, "the standby took over with a new epoch"
    assert first.logged("lost the lease; standing by"), "the old leader resumed and found itself fenced"
    assert (first_code, second_code) == (0, 0), "both stopped cleanly on SIGTERM"

    # Nothing missing, nothing made up, each aggregate's first deliveries in seq order.
    assert not proxy.errors, f"the proxy could not frame the Kafka protocol: {proxy.errors[:3]}"
    assert sum(p.records or 0 for p in proxy.produced) == len(records), "the proxy counted every record that landed"
    missing = sorted(committed - set(counts))
    assert not missing, f"{len(missing)} committed events never reached Kafka, first {missing[:10]}"
    assert set(counts) <= committed, "only committed events are published"
    for key, seqs in keys_in_seq_order(records).items():
        first_deliveries = list(dict.fromkeys(seqs))
        assert first_deliveries == sorted(first_deliveries), f"aggregate {key!r}: events out of seq order {seqs}"

    # The old leader stepped down: what it sent after resuming came from its queue, nothing it read after.
    assert sum(line.get("msg") == "took the lease" for line in old_lines) == 1, "the old leader never led again"
    assert sent_by_old_at_end == sent_by_old_after_resume, "the old leader sent nothing once it stood by"
    assert max(counts.values()) <= 2, "each event at most once per leader"
    # The new leader sends every event after its watermark once (no rebuild, asserted below), so a second
    # copy of an event committed after the pause would be one the old leader read after resuming.
    assert all(takeover_watermark < seq <= head_at_pause for seq in duplicated), \
        "only events the old leader had read before its pause, and the new one sent again, are duplicated"
    assert len(duplicated) <= MAX_IN_FLIGHT, "duplicates within the in-flight window"
    assert not second.logged("delivery failed; rebuilding the producer and rewinding to the watermark")

    # The persisted watermark never passed an unpublished seq, and never went back.
    appended: dict[int, int] = {}  # seq -> when its first copy was appended, in ms since the epoch
    for m in records:
        kind, ms = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME, "the topic stamps records with the broker's append time"
        appended[record_seq(m)] = min(ms, appended.get(record_seq(m), ms))
    seqs = sorted(committed)
    all_in_by = list(accumulate((appended[seq] for seq in seqs), max))  # every seq up to seqs[i] was in Kafka by
    watermarks = [sample.watermark for sample in watch.samples]
    assert watermarks == sorted(watermarks), "the persisted watermark only moves forward"
    for sample in watch.samples:
        upto = bisect_right(seqs, sample.watermark)
        assert upto == 0 or all_in_by[upto - 1] <= sample.at * 1000 + 1, \
            f"watermark {sample.watermark} persisted before every event up to it reached Kafka"


def test_a_leader_paused_in_the_middle_of_a_read_sends_none_of_it_after_the_takeover(
    postgres_url: str, proxied_kafka: ProxiedBroker, tmp_path: Path
) -> None:
    """The pause lands between a read and its sends: the database has answered the leader's read, the
    answer waits in its socket while it is paused, and it resumes with the rows in hand after a standby
    took over. Checked before each send, the lease has run out: it sends none of them."""
    url = postgres_url
    upgrade(url)
    proxy = proxied_kafka.proxy
    proxy.reset()
    bootstrap = proxied_kafka.bootstrap
    name = f"to-{uuid.uuid4().hex[:6]}"
    template = f"to{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    topic = template.replace("{aggregate_type}", "order")
    create_topic(bootstrap, topic)
    server = make_url(url)
    backlog, held, more = 100, 300, 100

    with FaultProxy((server.host or "127.0.0.1", server.port or 5432)) as database, OffsetsWatch(url, name) as watch:
        # Only the first instance reaches the database through the proxy.
        first = _spawn(database.url_for(url), bootstrap, name, template, FIRST, tmp_path / "first.log")
        second: BridgeProcess | None = None
        try:
            wait_until(lambda: (s := watch.latest()) is not None and s.owner_pid == first.pid, 30,
                       "the first instance to lead")
            second = _spawn(url, bootstrap, name, template, SECOND, tmp_path / "second.log")
            wait_until(lambda: second.logged("another instance holds the lease; standing by"), 30,
                       "the second instance to stand by")
            insert_events(url, backlog, aggregates=AGGREGATES)
            wait_until(lambda: watch.watermark() >= backlog, 30, "the leader to publish the backlog")
            # 1. The leader's next read that finds events (its result names horizon_low) is answered, and the
            # answer held back; the leader is paused while it waits for it, then the answer goes on.
            database.hold_result("horizon_low", min_rows=2)
            insert_events(url, held, aggregates=AGGREGATES, start=backlog)
            assert database.held.wait(10), "the leader read the new events"
            first.signal(signal.SIGSTOP)
            paused_at = time.monotonic()
            last_of_first = watch.last_of(first.pid)
            database.release()
            # 2. The standby takes over and publishes the events the paused leader has in hand.
            wait_until(lambda: (s := watch.latest()) is not None and s.owner_pid == second.pid, LEASE_TIMEOUT_S + 10,
                       "the standby to take over")
            wait_until(lambda: watch.watermark() >= backlog + held, 30, "the new leader to publish the held events")
            # 3. The old leader resumes with the rows of its read in hand.
            first.signal(signal.SIGCONT)
            resumed_at = time.monotonic()
            wait_until(lambda: first.logged("lost the lease; standing by"), 10, "the old leader to find itself fenced")
            insert_events(url, more, aggregates=AGGREGATES, start=backlog + held)
            wait_until(lambda: watch.watermark() >= backlog + held + more, 30, "the new leader to publish the rest")
            sent_by_old_after_resume = produced_by(proxy, FIRST, after=resumed_at)
            first.signal(signal.SIGTERM)
            second.signal(signal.SIGTERM)
            first_code, second_code = first.wait(30), second.wait(60)
        finally:
            database.release()
            first.stop_if_running()
            if second is not None:
                second.stop_if_running()

    records = read_topic(bootstrap, topic, isolation_level="read_uncommitted")
    _assert_whole(records)
    counts = Counter(record_seq(m) for m in records)
    committed = set(committed_seqs(url))
    takeover = _took_over_at(second)
    fenced = [line for line in first.log_lines() if line.get("msg") == "lost the lease; standing by"]
    print(f"\n[paused mid-read] paused {resumed_at - paused_at:.1f}s with a read of {held} events answered; "
          f"new leader took over at watermark {takeover['watermark']}; after SIGCONT the old leader sent "
          f"{sent_by_old_after_resume[1]} records in {sent_by_old_after_resume[0]} requests "
          f"({fenced[0].get('error')!r}); "
          f"{len(records)} records, {sum(counts.values()) - len(counts)} duplicates")

    assert takeover["epoch"] > last_of_first.epoch, "the standby took over with a new epoch"
    assert last_of_first.watermark >= backlog, "the old leader had published the backlog before the held read"
    assert (first_code, second_code) == (0, 0), "both stopped cleanly on SIGTERM"
    assert set(counts) == committed == set(range(1, backlog + held + more + 1)), "every committed event, no other"
    assert sent_by_old_after_resume == (0, 0), "the old leader sent nothing after resuming"
    assert all(counts[seq] == 1 for seq in range(backlog + 1, backlog + held + more + 1)), \
        "the events the old leader read before its pause went out once, from the new leader"
    for key, seqs in keys_in_seq_order(records).items():
        assert seqs == sorted(seqs), f"aggregate {key!r}: events out of seq order {seqs}"
