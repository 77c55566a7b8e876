"""Poison events, each kind: a payload over the topic's max.message.bytes, an empty aggregate_id (no
key), a payload that is not JSON, and an aggregate type that gives an illegal topic name.

Policy `halt` (a real `outbox-bridge run`, SQLite outbox): exit code 3, the log and the persisted
status name the seq, and the watermark stops just before it, with everything before it published.
Policy `dead-letter` (PostgreSQL outbox): each goes to the DLQ topic with the error in its headers,
and the bridge goes on publishing what follows. The dead-letter policy and a refusal by the broker, in both
deliveries: in exactly-once the dead letters and the events are read `read_committed`, each once."""

from __future__ import annotations

import json
import secrets
import uuid

import pytest
from sqlalchemy import create_engine, text

from bridge.migrate import upgrade
from tests.support import (
    bridge_config,
    bridge_env,
    read_offsets,
    read_topic,
    record_seq,
    spawn_bridge,
    start_bridge,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

SMALL_TOPIC_LIMIT = 2000
BIG_PAYLOAD = '{"blob": "' + "x" * 5000 + '"}'

# kind: (aggregate_type, aggregate_id, payload, what the reason says)
DELIVERIES = ("at-least-once", "exactly-once")

POISON = {
    "oversize": ("big", "a-1", BIG_PAYLOAD, f"over the {SMALL_TOPIC_LIMIT}-byte limit"),
    "empty_key": ("big", "", '{"ok": true}', "aggregate_id is empty"),
    "invalid_json": ("big", "a-1", '{"unterminated": ', "not valid JSON"),
    "unroutable": ("bad type!", "a-1", '{"ok": true}', "unroutable"),
}


def _insert(url: str, rows: list[tuple[str, str, str]]) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                 "VALUES (:event_id, :aggregate_type, :aggregate_id, 'Happened', :payload)"),
            [{"event_id": f"e-{uuid.uuid4().hex}", "aggregate_type": t, "aggregate_id": a, "payload": p}
             for t, a, p in rows],
        )
    engine.dispose()


def _good(count: int) -> list[tuple[str, str, str]]:
    return [("big", f"a-{i % 4}", f'{{"n": {i}}}') for i in range(count)]


@pytest.mark.parametrize("kind", sorted(POISON))
def test_halt_exits_3_naming_the_seq_with_the_watermark_just_before_it(
    kind, sqlite_url, kafka_bootstrap, topic_factory, tmp_path
) -> None:
    upgrade(sqlite_url)
    template = f"p{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    topic = template.replace("{aggregate_type}", "big")
    topic_factory(name=topic, partitions=3, config={"max.message.bytes": str(SMALL_TOPIC_LIMIT)})
    aggregate_type, aggregate_id, payload, reason = POISON[kind]
    _insert(sqlite_url, [*_good(10), (aggregate_type, aggregate_id, payload), *_good(5)])
    poison_seq = 11
    name = f"halt-{uuid.uuid4().hex[:6]}"
    bridge = spawn_bridge(bridge_env(sqlite_url, kafka_bootstrap, name, template, persist_interval_s=0.2),
                          tmp_path / "bridge.log")
    try:
        assert bridge.wait(60) == 3, "policy halt exits with code 3"
    finally:
        bridge.stop_if_running()

    halting = [line for line in bridge.log_lines() if line.get("msg", "").startswith("halting on a poison event")]
    assert len(halting) == 1 and halting[0]["seq"] == poison_seq and reason in halting[0]["reason"]
    row = read_offsets(sqlite_url, name)
    assert row is not None
    assert row.watermark == poison_seq - 1, "the watermark stops just before the poison event"
    assert row.status["halted_at_seq"] == poison_seq
    assert f"seq={poison_seq}" in row.status["last_error"] and reason in row.status["last_error"]
    assert sorted(record_seq(m) for m in read_topic(kafka_bootstrap, topic)) == list(range(1, poison_seq))


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_dead_letter_routes_each_kind_with_the_error_in_headers_and_goes_on(
    delivery, postgres_url, kafka_bootstrap, topic_factory
) -> None:
    upgrade(postgres_url)
    config = bridge_config(postgres_url, kafka_bootstrap, poison_policy="dead-letter", delivery=delivery)
    topic = config.topic_for("big")
    topic_factory(name=topic, partitions=3, config={"max.message.bytes": str(SMALL_TOPIC_LIMIT)})
    rows: list[tuple[str, str, str]] = []
    poison_seqs: dict[int, str] = {}
    for kind in sorted(POISON):
        rows += _good(3)
        aggregate_type, aggregate_id, payload, _ = POISON[kind]
        rows.append((aggregate_type, aggregate_id, payload))
        poison_seqs[len(rows)] = kind
    rows += _good(3)
    _insert(postgres_url, rows)
    bridge = start_bridge(config)
    try:
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == len(rows), 60,
                   "the bridge to get past every poison event")
        _insert(postgres_url, _good(5))  # and it goes on
        wait_until(lambda: bridge.daemon.tracker.watermark == len(rows) + 5, 30, "events after the poison ones")
    finally:
        assert bridge.stop() == 0

    dead_letters = read_topic(kafka_bootstrap, config.dlq_topic_name)
    dead = {record_seq(m): m for m in dead_letters}
    assert sorted(dead) == sorted(record_seq(m) for m in dead_letters) == sorted(poison_seqs), "each once"
    for seq, kind in poison_seqs.items():
        headers = dict(dead[seq].headers())
        reason = POISON[kind][3]
        assert reason in headers["dlq_reason"].decode(), (kind, headers["dlq_reason"])
        assert headers["dlq_bridge"].decode() == config.bridge_name
        assert headers["aggregate_type"].decode() == POISON[kind][0]
        assert dead[seq].value() == POISON[kind][2].encode(), "the payload is kept as it was"
    published = sorted(record_seq(m) for m in read_topic(kafka_bootstrap, topic))
    assert published == [seq for seq in range(1, len(rows) + 6) if seq not in poison_seqs]


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_a_record_the_broker_refuses_after_the_topic_check_halts_instead_of_retrying_forever(
    delivery, sqlite_url, kafka_bootstrap, topic_factory
) -> None:
    """The topic's limit is lowered after the bridge checked it: the broker refuses the record
    (MSG_SIZE_TOO_LARGE) together with the small events batched with it. The bridge sends each of them
    again alone (or, having checked the topic again, knows the big one is over the limit), and halts on
    it rather than re-sending it forever. The payload is
    random, so compression cannot bring the batch under the broker's limit. In exactly-once the refusal fails
    the whole transaction: the small events are sent again in a new one, and read_committed once each."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource

    upgrade(sqlite_url)
    config = bridge_config(sqlite_url, kafka_bootstrap, delivery=delivery)
    topic = config.topic_for("big")
    topic_factory(name=topic, partitions=3)
    _insert(sqlite_url, _good(5))
    bridge = start_bridge(config)
    try:
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == 5, 60,
                   "the first events (the topic is checked with its default limit)")
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        lowered = ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry("max.message.bytes", str(SMALL_TOPIC_LIMIT), incremental_operation=AlterConfigOpType.SET)])
        next(iter(admin.incremental_alter_configs([lowered]).values())).result(30)
        incompressible = json.dumps({"blob": secrets.token_urlsafe(4000)})
        _insert(sqlite_url, [*_good(2), ("big", "a-1", incompressible), *_good(2)])
        bridge.thread.join(60)
        assert not bridge.thread.is_alive(), "the bridge halted"
    finally:
        if bridge.thread.is_alive():
            bridge.stop()
    daemon = bridge.daemon
    assert bridge.result == [3]
    assert daemon.halted is not None and daemon.halted.seq == 8
    # The refusal made the bridge check the topic again, so it names the new limit.
    assert f"over the {SMALL_TOPIC_LIMIT}-byte limit" in daemon.halted.reason
    assert read_offsets(sqlite_url, config.bridge_name).watermark == 7, "the small events refused with it went out"
    published = sorted(record_seq(m) for m in read_topic(kafka_bootstrap, topic))
    if delivery == "exactly-once":
        assert published == list(range(1, 8)), "each committed once"
    else:
        assert set(published) == set(range(1, 8))
