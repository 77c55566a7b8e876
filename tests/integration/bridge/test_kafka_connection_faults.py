"""The bridge's Kafka connections cut at chosen protocol moments while writers commit out of seq order.

The bridge reaches a private broker only through `tests.kafkaproxy` (the broker advertises the proxy's
port, so metadata sends every client back through it; see `tests.proxiedbroker`). The proxy cuts a
connection, both sides at once, after every Nth Produce the broker wrote but before the client learns
it, on a Produce the broker never gets, halfway through a Produce response, or on a Metadata request.
PostgreSQL is reached directly. Every committed event must reach Kafka, each aggregate's first
deliveries in seq order; the idempotent producer retries a cut Produce under its original sequence
numbers, so the broker drops the copy: duplicates come only from a producer rebuild.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from bridge.migrate import upgrade
from tests.kafkaproxy import KafkaCut, KafkaMoment
from tests.kafkawire import METADATA, PRODUCE
from tests.proxiedbroker import ProxiedBroker
from tests.support import (
    bridge_config,
    committed_seqs,
    keys_in_seq_order,
    persisted_watermark,
    read_topic,
    record_seq,
    running,
    start_bridge,
    wait_until,
    write_out_of_seq_order,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

WRITERS = 12
WRITE_FOR_S = 10.0
AGGREGATES = 50

CUTS = {
    "produce-written": KafkaCut(KafkaMoment.PRODUCE_WRITTEN, every=5),
    "produce-unsent": KafkaCut(KafkaMoment.PRODUCE, every=5),
    "mid-response": KafkaCut(KafkaMoment.MID_RESPONSE, every=5, api_key=PRODUCE),
    # Not every 2nd: a client that reconnects sends two Metadata requests (brokers, then its own topic), so
    # a strict alternation can cut the second one each time and no topic check ever completes.
    "metadata": KafkaCut(KafkaMoment.METADATA, every=3),
    "metadata-response": KafkaCut(KafkaMoment.MID_RESPONSE, every=3, api_key=METADATA),
}


def _named(counts: Counter[KafkaMoment]) -> dict[str, int]:
    return {moment.value: count for moment, count in counts.items()}


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_a_bridge_whose_kafka_connections_are_cut_publishes_every_committed_event_in_order_per_key(
    postgres_url: str, proxied_kafka: ProxiedBroker, cut: KafkaCut
) -> None:
    url = postgres_url
    upgrade(url)
    proxy = proxied_kafka.proxy
    config = bridge_config(url, proxied_kafka.bootstrap, persist_interval_s=0.2)
    proxy.reset(cut)
    try:
        with running(start_bridge(config)) as bridge:
            ledger = write_out_of_seq_order(url, WRITERS, WRITE_FOR_S, AGGREGATES)
            head, written = max(ledger.committed), time.monotonic()
            # The persisted watermark, not the daemon's own state: it is what a restart resumes from.
            wait_until(lambda: persisted_watermark(url, config.bridge_name) >= head, 60,
                       f"the persisted watermark to reach the head seq {head}", bridge.where)
            caught_up_s = time.monotonic() - written
            assert bridge.stop() == 0
    finally:
        seen, cuts, requests = Counter(proxy.seen), Counter(proxy.cuts), Counter(proxy.requests)
        connections, unframed = proxy.connections, list(proxy.errors)
        said = (f"proxy saw {_named(seen)}, cut {_named(cuts)} over {connections} connections, "
                f"requests {dict(requests.most_common(6))}")
        print(f"\n[{cut.moment.value} every {cut.every}] {said}")
        proxy.reset()  # no more cuts: the check below reads the topic through the same proxy
    rebuilds = int(bridge.daemon.metrics.producer_rebuilds._value.get())

    records = read_topic(proxied_kafka.bootstrap, config.topic_for("order"))
    published = {record_seq(m) for m in records}
    committed = set(ledger.committed)
    lost = sorted(committed - published)
    duplicates = len(records) - len(published)
    print(f"[{cut.moment.value} every {cut.every}] writer seed {ledger.seed}: {len(committed)} committed "
          f"(head {head}), {ledger.late_commits()} commits after a higher seq's; {len(published)} published, "
          f"{len(lost)} lost (first {lost[:5]}), {duplicates} duplicates, "
          f"{rebuilds} producer rebuilds; watermark at head {caught_up_s:.1f}s after the writers stopped")

    assert not unframed, f"the proxy could not frame the Kafka protocol: {unframed[:3]}"
    assert not ledger.errors, f"a writer failed (and rolled back): {ledger.errors[:3]}"
    assert ledger.late_commits() > 0, "the schedule committed out of seq order"
    assert cuts[cut.moment] > 0, f"the proxy cut the bridge's connections at {cut.moment.value}"
    assert committed == set(committed_seqs(url)), "the ledger is what the database holds"
    assert not lost, f"{len(lost)} committed events never reached Kafka, first {lost[:10]}"
    assert published <= committed, "only committed events are published"
    if rebuilds == 0:
        assert duplicates == 0, "a cut Produce is retried under its sequence numbers: the broker keeps one copy"
    for key, seqs in keys_in_seq_order(records).items():
        first_deliveries = list(dict.fromkeys(seqs))
        assert first_deliveries == sorted(first_deliveries), f"aggregate {key!r}: events out of seq order {seqs}"
