"""After a permanent send failure and a producer rebuild, a plain consumer sees each aggregate's first
deliveries in seq order: the discarded producer sends nothing after the failed batch, and nothing it
had in flight lands after the re-sends.

The broker refuses one batch for good: the topic's max.message.bytes is lowered after the bridge
checked it, and an incompressible record is sent among small ones of the same keys (PostgreSQL
outbox, policy dead-letter). Small batches (`batch.num.messages`) keep many requests in flight on
every partition when the refusal comes, so the batches after the refused one are on the wire too.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from itertools import pairwise

import pytest
from confluent_kafka import Message
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from sqlalchemy import create_engine, text

from bridge.migrate import upgrade
from tests.support import bridge_config, read_topic, record_seq, start_bridge, wait_until

pytestmark = pytest.mark.timeout(120)

#: Each round lowers the topic's max.message.bytes below what the bridge last checked, then sends a big
#: record between the two limits among small ones. A batch of small records always fits.
LIMITS = (80_000, 50_000, 20_000)
SMALL_RUN = 1000  # small events before and after each big one
KEYS = 12  # few keys, so every batch of a partition holds each of its keys


def _insert(url: str, rows: list[tuple[str, str]]) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                 "VALUES (:event_id, 'order', :aggregate_id, 'Changed', :payload)"),
            [{"event_id": f"e-{uuid.uuid4().hex}", "aggregate_id": a, "payload": p} for a, p in rows],
        )
    engine.dispose()


def _small(start: int, count: int) -> list[tuple[str, str]]:
    return [(f"order-{n % KEYS}", f'{{"n": {n}}}') for n in range(start, start + count)]


def _lower_limit(bootstrap: str, topic: str, limit: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    lowered = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)])
    next(iter(admin.incremental_alter_configs([lowered]).values())).result(30)


def _first_deliveries(records: list[Message]) -> dict[bytes, list[int]]:
    """Per key, each seq the first time the consumer sees it (duplicates from re-sends dropped)."""
    seen: set[int] = set()
    first: dict[bytes, list[int]] = {}
    for record in records:
        seq = record_seq(record)
        if seq not in seen:
            seen.add(seq)
            key = record.key()
            assert key is not None
            first.setdefault(key, []).append(seq)
    return first


def test_after_a_refused_batch_and_a_rebuild_each_key_is_first_delivered_in_seq_order(
    postgres_url: str, kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    upgrade(postgres_url)
    config = bridge_config(
        postgres_url, kafka_bootstrap, poison_policy="dead-letter", linger_ms=1,
        producer_extra={"batch.num.messages": 10},  # small batches: many requests in flight
    )
    topic = config.topic_for("order")
    topic_factory(name=topic, partitions=6)
    _insert(postgres_url, _small(0, KEYS))
    bridge = start_bridge(config)
    try:
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == KEYS, 30,
                   "the first events (the topic is checked with its default limit)")
        head = KEYS
        big_seqs: list[int] = []
        for round_, limit in enumerate(LIMITS):
            _lower_limit(kafka_bootstrap, topic, limit)
            # Random, so compression cannot bring it under the limit (about 1.33 characters a byte), and
            # under the limit the bridge checked last; its key is shared with small events.
            big = (f"order-{round_ * 5 % KEYS}", f'{{"blob": "{secrets.token_urlsafe(limit)}"}}')
            rows = [*_small(head, SMALL_RUN), big, *_small(head + SMALL_RUN + 1, SMALL_RUN)]
            _insert(postgres_url, rows)
            big_seqs.append(head + SMALL_RUN + 1)
            head += len(rows)
            wait_until(lambda head=head: bridge.daemon.tracker.watermark == head, 15,
                       f"round {round_ + 1}: every event, the big one dead-lettered")
        rebuilds = bridge.daemon.metrics.producer_rebuilds._value.get()
    finally:
        assert bridge.stop() == 0

    assert rebuilds >= len(LIMITS), "each refused batch made the bridge rebuild its producer"
    records = read_topic(kafka_bootstrap, topic)
    assert {record_seq(m) for m in records} == set(range(1, head + 1)) - set(big_seqs), "nothing lost"
    out_of_order = {
        key.decode(): seqs for key, seqs in _first_deliveries(records).items() if seqs != sorted(seqs)
    }
    assert not out_of_order, f"first deliveries out of seq order for keys {sorted(out_of_order)}: " + "; ".join(
        f"{key}: {[(a, b) for a, b in pairwise(seqs) if a > b][:3]}"
        for key, seqs in sorted(out_of_order.items())
    )
    assert sorted(record_seq(m) for m in read_topic(kafka_bootstrap, config.dlq_topic_name)) == big_seqs
