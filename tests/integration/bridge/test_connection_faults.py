"""The bridge's PostgreSQL connections cut at chosen protocol moments while writers commit out of seq order.

The bridge reaches PostgreSQL only through `tests.faultproxy`, which cuts a connection (both sides, as
a restart, failover or network drop does) when the bridge ends a read with ROLLBACK, at COMMIT, halfway
through a result, or when a notification is due on its LISTEN connection. The writers go to PostgreSQL
directly, commit out of seq order and never roll back, so there is no hole to settle: every committed
event must reach Kafka, in seq order per aggregate, and the persisted watermark must never pass an event
that did not.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy.engine import make_url

from bridge.migrate import upgrade
from tests.faultproxy import Cut, FaultProxy, Moment
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

WRITERS = 8
WRITE_FOR_S = 12.0
AGGREGATES = 20

CUTS = {
    "rollback": Cut(Moment.ROLLBACK, every=7),
    "mid-result": Cut(Moment.MID_RESULT, every=5, after_rows=2),
    "commit": Cut(Moment.COMMIT, every=7),
    "listening": Cut(Moment.LISTENING, every=3),
}

@contextmanager
def _sampling_watermark(url: str, bridge_name: str, every_s: float = 0.1) -> Iterator[list[int]]:
    """The persisted watermark, read directly (not through the proxy) every `every_s` until the block ends."""
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            samples.append(persisted_watermark(url, bridge_name))

    thread = threading.Thread(target=sample, name="watermark-sampler", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(10)
        samples.append(persisted_watermark(url, bridge_name))


def _named(counts: Counter[Moment]) -> dict[str, int]:
    return {moment.value: count for moment, count in counts.items()}


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_a_bridge_whose_connections_are_cut_publishes_every_committed_event_and_settles_no_hole(
    postgres_url: str, kafka_bootstrap: str, cut: Cut
) -> None:
    url = postgres_url
    upgrade(url)
    server = make_url(url)
    with FaultProxy((server.host or "127.0.0.1", server.port or 5432), cut) as proxy:
        config = bridge_config(proxy.url_for(url), kafka_bootstrap, persist_interval_s=0.2)
        with _sampling_watermark(url, config.bridge_name) as watermarks, running(start_bridge(config)) as bridge:
            ledger = write_out_of_seq_order(url, WRITERS, WRITE_FOR_S, AGGREGATES)
            head = max(ledger.committed)
            # The persisted watermark, not the daemon's own state: it is what a restart resumes from.
            wait_until(lambda: bool(watermarks) and watermarks[-1] >= head, 45,
                       f"the persisted watermark to reach the head seq {head}")
            assert bridge.stop() == 0
        daemon = bridge.daemon

    records = read_topic(kafka_bootstrap, config.topic_for("order"))
    published = {record_seq(m) for m in records}
    committed = set(ledger.committed)
    lost = sorted(committed - published)
    past_a_lost_event = [w for w in watermarks if lost and w >= lost[0]]
    print(f"\n[{cut.moment.value}] writer seed {ledger.seed}: {len(committed)} committed (head {head}), "
          f"{ledger.late_commits()} commits after a higher seq's; proxy saw {_named(proxy.seen)}, "
          f"cut {_named(proxy.cuts)} over {proxy.connections} connections; {len(published)} published, "
          f"{len(lost)} lost (first {lost[:5]}), {daemon.holes_settled} holes settled, "
          f"{len(records) - len(published)} duplicates; persisted watermark max {max(watermarks, default=0)}, "
          f"{len(past_a_lost_event)} of {len(watermarks)} samples at or above a lost seq; "
          f"client statements {dict(proxy.statements.most_common(8))}")

    assert not ledger.errors, f"a writer failed (and rolled back): {ledger.errors[:3]}"
    assert ledger.late_commits() > 0, "the schedule committed out of seq order"
    assert proxy.cuts[cut.moment] > 0, f"the proxy cut the bridge's connections at {cut.moment.value}"
    assert committed == set(committed_seqs(url)), "the ledger is what the database holds"
    assert not lost, f"{len(lost)} committed events never reached Kafka, first {lost[:10]}"
    assert published <= committed, "only committed events are published"
    assert daemon.holes_settled == 0, "writers never roll back, so no hole is settled"
    assert not past_a_lost_event, "the persisted watermark never passes an event that is not in Kafka"
    for key, seqs in keys_in_seq_order(records).items():
        first_deliveries = list(dict.fromkeys(seqs))
        assert first_deliveries == sorted(first_deliveries), f"aggregate {key!r}: events out of seq order {seqs}"
