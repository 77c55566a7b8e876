"""The same outbox rows published by the bridge and by Debezium (Outbox Event Router): the records agree field by
field, except for the differences ops/debezium.py lists, which are asserted to be exactly those.

The test starts its own Kafka Connect worker (distributed mode, its own group and internal topics) on a
loopback port, a Debezium connector with its own slot and publication on a fresh database, and
`outbox-bridge run` on the same database; both publish under their own topic prefix. Everything is stopped,
deleted and dropped afterwards, the replication slot included.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy.engine import make_url

from bridge.migrate import upgrade
from tests.support import bridge_env, read_topic, spawn_bridge, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops"))
import debezium
from stack import connect  # ops/ holds scripts and the stack package, not on the path by default

PARTITIONS = 6
AGGREGATE_TYPES = ("order", "customer")
CONNECTOR = "outbox"


def _dsn(url: str) -> str:
    parsed = make_url(url)
    return f"host={parsed.host} port={parsed.port} user={parsed.username} dbname={parsed.database}"


# Whole seconds (Python's isoformat drops the fraction then, Debezium does not) and fractions with trailing zeros.
_MICROS = (0, 500_000, 120_000, 123_000)


def _rows(run: str) -> list[dict[str, Any]]:
    """Rows that exercise the format: two topics, keys with several events, payload text that a JSON
    round trip would change, non-ASCII, occurred_at with and without a fraction, row headers."""
    rows: list[dict[str, Any]] = []
    for i in range(40):
        aggregate_type = AGGREGATE_TYPES[i % 2]
        rows.append({
            "event_id": f"{run}-{i:03d}",
            "aggregate_type": aggregate_type,
            "aggregate_id": f"{aggregate_type}-{i % 7}",
            "event_type": "OrderPlaced" if i % 3 else "Bestellung_geändert",
            # Spacing, key order and escapes as written: the value must be these bytes.
            "payload": f'{{ "n": {i},"b":1.50, "a" : "caf\\u00e9 ü €", "list":[1, 2 ,3]}}',
            "headers": json.dumps({"trace_id": f"t-{i}", "tenant": "acme"}) if i % 10 == 0 else None,
            "occurred_at": datetime(2026, 1, 31, 12, 0, i % 60, _MICROS[i % len(_MICROS)] + (i if i % 4 == 3 else 0),
                                    tzinfo=UTC),
        })
    return rows


def _insert(dsn: str, rows: list[dict[str, Any]]) -> None:
    with psycopg.connect(dsn) as conn:
        for start in range(0, len(rows), 10):  # a few transactions of 10 rows
            with conn.transaction():
                for row in rows[start:start + 10]:
                    conn.execute(
                        "INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload, "
                        "headers, occurred_at) VALUES (%(event_id)s, %(aggregate_type)s, %(aggregate_id)s, "
                        "%(event_type)s, %(payload)s, %(headers)s, %(occurred_at)s)", row)


@pytest.fixture()
def worker(kafka_bootstrap: str) -> Iterator[connect.ConnectWorker]:
    tag = uuid.uuid4().hex[:8]
    # A fast offset flush so the slot is confirmed during the test; the worker is gone afterwards anyway.
    worker = connect.ConnectWorker(name=f"connect-t{tag}", bootstrap=kafka_bootstrap, rest_port=connect.free_port(),
                                   offset_flush_ms=5_000)
    try:
        worker.start(timeout=150)
        yield worker
    finally:
        worker.stop()
        worker.delete_internal_topics()
        shutil.rmtree(worker.home, ignore_errors=True)


def _create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        future.result(30)


def _delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(names).values():
        with contextlib.suppress(KafkaException):  # a topic that was never created is fine
            future.result(30)


def _headers(msg: Any) -> list[tuple[str, bytes]]:
    return list(msg.headers() or [])


def test_debezium_publishes_our_record_format_except_the_listed_differences(
        worker: connect.ConnectWorker, postgres_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    dsn = _dsn(postgres_url)
    with psycopg.connect(dsn) as conn:
        if conn.execute("SHOW wal_level").fetchone() != ("logical",):
            pytest.skip("Debezium needs wal_level=logical (the local stack's PostgreSQL has it)")
    upgrade(postgres_url)
    run = uuid.uuid4().hex[:8]
    bridge_prefix, debezium_prefix = f"t13b.{run}.", f"t13d.{run}."
    topics = [f"{p}outbox.event.{t}" for p in (bridge_prefix, debezium_prefix) for t in AGGREGATE_TYPES]
    slot, publication = f"dbz_{run}", f"dbz_{run}"
    _create_topics(kafka_bootstrap, topics)
    bridge = None
    try:
        config = debezium.outbox_connector_config(
            dbname=make_url(postgres_url).database or "", port=make_url(postgres_url).port or 5432,
            slot=slot, publication=publication, topic_prefix=debezium_prefix, partitions=PARTITIONS)
        worker.put_connector(CONNECTOR, config)
        worker.wait_state(CONNECTOR, "RUNNING", timeout=60)
        # Streaming once the slot is there and its walsender attached: later rows are captured.
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                                            (slot,)).fetchone() == (True,), 60, "Debezium's slot to be active")
        rows = _rows(run)
        written_from_ms = int(time.time() * 1000)
        _insert(dsn, rows)
        bridge = spawn_bridge(bridge_env(postgres_url, kafka_bootstrap, f"t13-{run}",
                                         f"{bridge_prefix}outbox.event.{{aggregate_type}}",
                                         topic_partitions=PARTITIONS), tmp_path / "bridge.log")

        def published(prefix: str) -> list[Any]:
            return [m for t in AGGREGATE_TYPES for m in read_topic(kafka_bootstrap, f"{prefix}outbox.event.{t}")]

        wait_until(lambda: len(published(bridge_prefix)) >= len(rows), 60, "the bridge to publish every row")
        wait_until(lambda: len(published(debezium_prefix)) >= len(rows), 60, "Debezium to publish every row")
        ours = {dict(_headers(m))["event_id"]: m for m in published(bridge_prefix)}
        theirs = {dict(_headers(m))["event_id"]: m for m in published(debezium_prefix)}
        read_by_ms = int(time.time() * 1000)
    finally:
        if bridge is not None:
            bridge.stop_if_running()
        with contextlib.suppress(connect.ConnectError):  # a dead worker has no connector to delete
            worker.delete_connector(CONNECTOR)
        debezium.drop_slot(dsn, slot, publication)  # always: a leftover slot pins WAL for the whole server
        _delete_topics(kafka_bootstrap, topics)

    assert len(ours) == len(theirs) == len(rows)
    assert set(ours) == set(theirs)
    for row in rows:
        mine, peer = ours[row["event_id"].encode()], theirs[row["event_id"].encode()]
        where = f"event {row['event_id']}"
        # Same topic name under each side's prefix, same key, hence the same partition (murmur2 both sides).
        assert mine.topic().removeprefix(bridge_prefix) == peer.topic().removeprefix(debezium_prefix), where
        assert peer.key() == mine.key() == row["aggregate_id"].encode(), where
        assert peer.partition() == mine.partition(), where
        assert peer.value() == mine.value() == row["payload"].encode(), where
        ours_h, theirs_h = _headers(mine), _headers(peer)
        # The five metadata headers, in the same order; the row's own headers follow on the bridge's side only.
        assert [k for k, _ in theirs_h] == list(debezium.HEADER_COLUMNS), f"{where}: {theirs_h}"
        assert [k for k, _ in ours_h[:5]] == list(debezium.HEADER_COLUMNS), where
        for (name, value), (_, peer_value) in zip(ours_h[:5], theirs_h, strict=True):
            if name == "occurred_at":
                # Difference "occurred_at": the same instant, other text.
                assert _instant(value) == _instant(peer_value) == row["occurred_at"], where
                assert value == row["occurred_at"].isoformat().encode(), where
                assert peer_value == _zoned_timestamp(row["occurred_at"]), where
            else:
                assert peer_value == value, f"{where}: header {name}: {peer_value!r} != {value!r}"
        # Difference "row headers": present on the bridge's records only.
        expected_extra = [(k, v.encode()) for k, v in json.loads(row["headers"]).items()] if row["headers"] else []
        assert ours_h[5:] == expected_extra, where
        assert len(theirs_h) == 5, where
        # Difference "timestamp": each relay's own clock while the test ran, not the row's occurred_at.
        for message in (mine, peer):
            kind, stamp = message.timestamp()
            assert kind == TIMESTAMP_CREATE_TIME and written_from_ms - 1000 <= stamp <= read_by_ms + 1000, where
    assert set(debezium.DIFFERENCES) == {"occurred_at", "row headers", "timestamp"}
    # The task's producer ran with the bridge's settings, not Connect's (non-idempotent) defaults.
    logged = _logged_producer_config(worker.log_file.read_text(errors="replace"), f"connector-producer-{CONNECTOR}-0")
    expected = {**worker.producer, "acks": "-1"}  # the client logs acks=all as -1
    assert {key: logged.get(key) for key in expected} == expected


def _logged_producer_config(log: str, client_id: str) -> dict[str, str]:
    """The `ProducerConfig values:` block the worker logged for client_id (ops/kafka/connect-log4j2.properties)."""
    for block in log.split("ProducerConfig values:")[1:]:
        settings = {}
        for line in block.splitlines()[1:]:
            if not line.startswith("\t"):
                break
            key, _, value = line.strip().partition(" = ")
            settings[key] = value
        if settings.get("client.id") == client_id:
            return settings
    raise AssertionError(f"the worker logged no producer config for {client_id}")


def _zoned_timestamp(at: datetime) -> bytes:
    """Debezium's text for a timestamptz(6) (ZonedTimestamp): always six fraction digits, `Z` for UTC."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()


def _instant(text: bytes) -> datetime:
    return datetime.fromisoformat(text.decode().replace("Z", "+00:00"))
