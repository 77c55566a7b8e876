"""BRIDGE_VALUE_FORMAT=json-schema through the real bridge, a real broker and a real schema registry (Apicurio
Registry's Confluent API, from the local stack): every value is the payload as written behind its subject's
schema id, and Confluent's JSONDeserializer reads it back as the row's payload; a payload that fails its schema
is poison (dead-lettered with the reason while the rest is published, or the bridge halts naming it); with
BRIDGE_SCHEMA_DIR the bridge registers each event type's schema itself; and a URL with no registry's API behind it
stops the bridge at start-up, before it leads, naming the URL and the setting."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from bridge.config import BridgeConfig
from bridge.core.wire_format import unframe
from bridge.exits import EXIT_USAGE
from bridge.migrate import upgrade
from tests.support import bridge_config, read_topic, start_bridge, wait_until

pytest.importorskip("confluent_kafka.schema_registry", reason="needs the schema-registry extra")
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ORDER_PLACED = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "OrderPlaced", "type": "object",
    "properties": {"n": {"type": "integer"}, "note": {"type": "string"}}, "required": ["n", "note"],
})


def _insert(url: str, payloads: list[str]) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                 "VALUES (:event_id, 'order', :aggregate_id, 'OrderPlaced', :payload)"),
            [{"event_id": f"e-{uuid.uuid4().hex}", "aggregate_id": f"a-{i % 4}", "payload": payload}
             for i, payload in enumerate(payloads)],
        )
    engine.dispose()


def _good(first: int, count: int) -> list[str]:
    # Spacing a JSON round trip would change: the value must carry the text as written.
    return [f'{{ "n" : {n}, "note": "caf\\u00e9 {n}" }}' for n in range(first, first + count)]


def _config(url: str, bootstrap: str, registry: str, **settings: Any) -> BridgeConfig:
    return bridge_config(url, bootstrap, value_format="json-schema", schema_registry_url=registry, **settings)


def _publish(config: BridgeConfig, events: int) -> None:
    bridge = start_bridge(config)
    wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == events, 60,
               f"{events} events published")
    assert bridge.stop() == 0


def _read(registry: SchemaRegistryClient, topic: str, value: bytes) -> Any:
    deserializer = JSONDeserializer(None, schema_registry_client=registry)
    return deserializer(value, SerializationContext(topic, MessageField.VALUE))


def test_values_are_framed_payloads_that_confluents_deserializer_reads_back(
    sqlite_url: str, kafka_bootstrap: str, schema_registry_url: str
) -> None:
    upgrade(sqlite_url)
    payloads = _good(0, 20)
    _insert(sqlite_url, payloads)
    config = _config(sqlite_url, kafka_bootstrap, schema_registry_url)
    topic = config.topic_for("order")
    registry = SchemaRegistryClient({"url": schema_registry_url})
    schema_id = registry.register_schema(f"{topic}-OrderPlaced", Schema(ORDER_PLACED, "JSON"))
    _publish(config, len(payloads))
    records = read_topic(kafka_bootstrap, topic)
    assert len(records) == len(payloads)
    for message in records:
        seq = int(dict(message.headers())["seq"])
        written = payloads[seq - 1]
        assert unframe(message.value()) == (schema_id, written.encode()), "the payload as written, framed"
        assert _read(registry, topic, message.value()) == json.loads(written)


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_payload_failing_its_schema_is_dead_lettered_with_the_reason_and_the_rest_published(
    delivery: str, sqlite_url: str, kafka_bootstrap: str, schema_registry_url: str
) -> None:
    upgrade(sqlite_url)
    _insert(sqlite_url, [*_good(0, 5), '{"n": "six", "note": "x"}', *_good(6, 5)])
    config = _config(sqlite_url, kafka_bootstrap, schema_registry_url, poison_policy="dead-letter",
                     delivery=delivery)
    topic = config.topic_for("order")
    SchemaRegistryClient({"url": schema_registry_url}).register_schema(f"{topic}-OrderPlaced",
                                                                       Schema(ORDER_PLACED, "JSON"))
    _publish(config, 11)
    assert sorted(int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, topic)) == [
        *range(1, 6), *range(7, 12)]
    [letter] = read_topic(kafka_bootstrap, config.dlq_topic_name)
    headers = dict(letter.headers())
    assert headers["seq"] == b"6"
    assert f"subject {topic}-OrderPlaced" in headers["dlq_reason"].decode()
    assert "is not of type 'integer'" in headers["dlq_reason"].decode()
    assert letter.value() == b'{"n": "six", "note": "x"}', "the dead letter keeps the payload as written"


def test_a_payload_failing_its_schema_halts_the_bridge_under_halt(
    sqlite_url: str, kafka_bootstrap: str, schema_registry_url: str
) -> None:
    upgrade(sqlite_url)
    _insert(sqlite_url, [*_good(0, 3), '{"note": "no n"}', *_good(4, 3)])
    config = _config(sqlite_url, kafka_bootstrap, schema_registry_url)
    topic = config.topic_for("order")
    SchemaRegistryClient({"url": schema_registry_url}).register_schema(f"{topic}-OrderPlaced",
                                                                       Schema(ORDER_PLACED, "JSON"))
    bridge = start_bridge(config)
    bridge.thread.join(60)
    assert bridge.result == [3], "policy halt exits with code 3"
    assert bridge.daemon.halted is not None and bridge.daemon.halted.seq == 4
    assert "'n' is a required property" in bridge.daemon.halted.reason
    assert sorted(int(dict(m.headers())["seq"]) for m in read_topic(kafka_bootstrap, topic)) == [1, 2, 3]


def test_with_a_schema_dir_the_bridge_registers_each_event_types_schema(
    sqlite_url: str, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
) -> None:
    upgrade(sqlite_url)
    (tmp_path / "OrderPlaced.json").write_text(ORDER_PLACED)
    _insert(sqlite_url, _good(0, 5))
    config = _config(sqlite_url, kafka_bootstrap, schema_registry_url, schema_dir=str(tmp_path))
    topic = config.topic_for("order")
    _publish(config, 5)
    registry = SchemaRegistryClient({"url": schema_registry_url})
    registered = registry.get_latest_version(f"{topic}-OrderPlaced")
    assert {unframe(m.value())[0] for m in read_topic(kafka_bootstrap, topic)} == {registered.schema_id}


def test_a_url_with_no_registrys_api_behind_it_stops_the_bridge_before_it_leads(
    sqlite_url: str, kafka_bootstrap: str, schema_registry_url: str
) -> None:
    upgrade(sqlite_url)
    _insert(sqlite_url, _good(0, 3))
    wrong = schema_registry_url.rsplit("/apis/", 1)[0] + "/apis/nothing"
    bridge = start_bridge(_config(sqlite_url, kafka_bootstrap, wrong))
    bridge.thread.join(60)
    assert bridge.result == [EXIT_USAGE], "not retried: waiting cannot mend a wrong URL"
    assert bridge.daemon.tracker is None, "never led"
    assert f"the schema registry at {wrong} does not answer as a schema registry" in str(bridge.daemon.last_error)
    assert "check BRIDGE_SCHEMA_REGISTRY_URL" in str(bridge.daemon.last_error)
