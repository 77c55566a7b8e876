"""The registry side of the json-schema format, on confluent-kafka's own in-memory registry client: subjects by
Confluent's strategies, the latest version looked up or a schema file registered, each registry answer turned
into poison, a retry or a refused configuration; the start-up check that the registry answers the bridge's login,
on a registry stand-in over HTTP; and values the bridge frames read back by Confluent's
JSONDeserializer."""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import SecretStr

pytest.importorskip("confluent_kafka.schema_registry", reason="needs the schema-registry extra")

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bridge.config import SchemaSection, SubjectNaming
from bridge.core.records import OutboxRow, record_and_payload
from bridge.core.wire_format import unframe
from bridge.errors import (
    PoisonEventError,
    SchemaMissingError,
    SchemaRegistryRefusedError,
    SchemaRegistryUnavailableError,
)
from bridge.schemas.catalog import RegistryCatalog, registry_client, subject_for
from bridge.schemas.values import SchemaValues

pytestmark = pytest.mark.unit

TOPIC = "outbox.event.order"
ORDER_PLACED = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "OrderPlaced", "type": "object",
    "properties": {"total": {"type": "number"}, "currency": {"type": "string"}},
    "required": ["total", "currency"],
})


def _registry() -> SchemaRegistryClient:
    return MockSchemaRegistryClient({"url": "mock://"})


def _row(payload: str, seq: int = 1) -> OutboxRow:
    return OutboxRow(seq=seq, event_id=f"ev-{seq}", aggregate_type="order", aggregate_id="o-1",
                     event_type="OrderPlaced", payload=payload, headers=None,
                     occurred_at=datetime(2025, 6, 1, 8, 30, tzinfo=UTC), schema_version=1)


def _route(aggregate_type: str) -> str:
    return f"outbox.event.{aggregate_type}"


@pytest.mark.parametrize(("naming", "subject"), [
    (SubjectNaming.TOPIC_RECORD, "outbox.event.order-OrderPlaced"),
    (SubjectNaming.RECORD, "OrderPlaced"),
    (SubjectNaming.TOPIC, "outbox.event.order-value"),
])
def test_subjects_follow_confluents_strategies(naming: SubjectNaming, subject: str) -> None:
    assert subject_for(naming, TOPIC, "OrderPlaced") == subject


def test_the_latest_version_of_the_subject_is_used_and_confluents_deserializer_reads_the_value() -> None:
    registry = _registry()
    schema_id = registry.register_schema(f"{TOPIC}-OrderPlaced", Schema(ORDER_PLACED, "JSON"))
    values = SchemaValues(RegistryCatalog(registry, SubjectNaming.TOPIC_RECORD))
    row = _row('{"total": 12.5, "currency": "EUR"}')
    record = values.framed(row, *record_and_payload(row, _route))
    assert unframe(record.value) == (schema_id, row.payload.encode())
    read = JSONDeserializer(None, schema_registry_client=registry)
    assert read(record.value, SerializationContext(TOPIC, MessageField.VALUE)) == {"total": 12.5, "currency": "EUR"}


def test_a_payload_failing_the_registered_schema_is_poison_saying_where() -> None:
    registry = _registry()
    registry.register_schema(f"{TOPIC}-OrderPlaced", Schema(ORDER_PLACED, "JSON"))
    values = SchemaValues(RegistryCatalog(registry, SubjectNaming.TOPIC_RECORD))
    row = _row('{"total": "12.5", "currency": "EUR"}', seq=9)
    with pytest.raises(PoisonEventError) as raised:
        values.framed(row, *record_and_payload(row, _route))
    assert raised.value.seq == 9
    assert "'12.5' is not of type 'number' at $.total" in raised.value.reason


def test_a_subject_without_a_schema_says_how_to_register_one() -> None:
    catalog = RegistryCatalog(_registry(), SubjectNaming.TOPIC_RECORD)
    with pytest.raises(SchemaMissingError) as raised:
        catalog(TOPIC, "OrderPlaced")
    assert f"no schema registered for subject {TOPIC}-OrderPlaced" in str(raised.value)
    assert "BRIDGE_SCHEMA_DIR" in str(raised.value)


def test_with_a_schema_dir_the_events_schema_file_is_registered_once(tmp_path: Path) -> None:
    (tmp_path / "OrderPlaced.json").write_text(ORDER_PLACED)
    registry = _registry()
    catalog = RegistryCatalog(registry, SubjectNaming.RECORD, tmp_path)
    first = catalog(TOPIC, "OrderPlaced")
    again = catalog("outbox.event.archive", "OrderPlaced")
    assert first.schema_id == again.schema_id
    assert registry.get_latest_version("OrderPlaced").version == 1
    with pytest.raises(SchemaMissingError, match=r"OrderShipped\.json"):
        catalog(TOPIC, "OrderShipped")


def test_a_registered_text_that_is_no_json_schema_is_refused_as_unusable(tmp_path: Path) -> None:
    (tmp_path / "OrderPlaced.json").write_text('{"type": 12}')
    with pytest.raises(SchemaMissingError, match="not a valid JSON Schema"):
        RegistryCatalog(_registry(), SubjectNaming.TOPIC_RECORD, tmp_path)(TOPIC, "OrderPlaced")


class _Failing(MockSchemaRegistryClient):
    def __init__(self, error: Exception) -> None:
        super().__init__({"url": "mock://"})
        self.error = error

    def get_latest_version(self, subject_name: str, fmt: str | None = None) -> object:
        raise self.error


@pytest.mark.parametrize(("error", "raised"), [
    (SchemaRegistryError(500, 50001, "storage failed"), SchemaRegistryUnavailableError),
    (SchemaRegistryError(401, 40101, "unauthorized"), SchemaRegistryRefusedError),
    (SchemaRegistryError(403, 40301, "forbidden"), SchemaRegistryRefusedError),
    (SchemaRegistryError(422, 42201, "invalid schema"), SchemaMissingError),
])
def test_registry_errors_become_a_retry_a_refused_configuration_or_poison(error: Exception,
                                                                        raised: type[Exception]) -> None:
    with pytest.raises(raised):
        RegistryCatalog(_Failing(error), SubjectNaming.TOPIC_RECORD)(TOPIC, "OrderPlaced")


def test_an_unreachable_registry_is_retried_not_poison() -> None:
    client = SchemaRegistryClient({"url": "http://127.0.0.1:9", "max.retries": 0})
    with pytest.raises(SchemaRegistryUnavailableError, match="unreachable"):
        RegistryCatalog(client, SubjectNaming.TOPIC_RECORD)(TOPIC, "OrderPlaced")


def test_a_registry_that_does_not_answer_is_given_up_on_within_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        client = registry_client(SchemaSection(url=url, naming=SubjectNaming.TOPIC_RECORD, timeout_s=0.5))
        started = time.monotonic()
        with pytest.raises(SchemaRegistryUnavailableError):
            RegistryCatalog(client, SubjectNaming.TOPIC_RECORD)(TOPIC, "OrderPlaced")
    assert time.monotonic() - started < 5, "the loop must get back to its acks and its lease"


# ----------------------------------------------------------------------------- the start-up check: answers()


class _Answering(BaseHTTPRequestHandler):
    """A registry stand-in on loopback answering every request with `status`; `seen` keeps each request's path
    and Authorization header."""

    status = 200
    page: bytes | None = None
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        body = self.page or (b"[]" if self.status == 200 else json.dumps({"error_code": self.status * 100 + 1,
                                                                          "message": "no"}).encode())
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


#: What the stand-in of each test was sent: (path, Authorization header).
_SEEN: list[tuple[str, str | None]] = []


@pytest.fixture()
def answering() -> Iterator[Callable[..., str]]:
    """Starts a stand-in answering with a given status (and body); gives its URL."""
    servers: list[ThreadingHTTPServer] = []
    _SEEN.clear()

    def start(status: int, page: bytes | None = None) -> str:
        handler = type("Handler", (_Answering,), {"status": status, "page": page, "seen": _SEEN})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/apis/ccompat/v7"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _catalog(url: str, user: str | None = None) -> RegistryCatalog:
    section = SchemaSection(url=url, naming=SubjectNaming.TOPIC_RECORD, user=user,
                            password=SecretStr("hunter2") if user else None, timeout_s=2)
    return RegistryCatalog(registry_client(section), section.naming, url=url)


def test_a_registry_that_answers_the_login_passes_and_was_asked_with_the_credentials(
    answering: Callable[..., str],
) -> None:
    url = answering(200)
    _catalog(url, user="relay").answers()
    ((path, authorization),) = _SEEN
    assert path.partition("?")[0] == "/apis/ccompat/v7/subjects"
    assert authorization == "Basic " + base64.b64encode(b"relay:hunter2").decode()


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_login_is_refused_naming_the_url_and_the_settings_to_fix(
    answering: Callable[..., str], status: int,
) -> None:
    url = answering(status)
    with pytest.raises(SchemaRegistryRefusedError) as raised:
        _catalog(url, user="relay").answers()
    message = str(raised.value)
    assert f"the schema registry at {url} refused the bridge's login" in message
    assert "BRIDGE_SCHEMA_REGISTRY_USER and BRIDGE_SCHEMA_REGISTRY_PASSWORD" in message
    assert "hunter2" not in message


def test_a_url_that_is_no_registrys_api_is_refused_naming_the_setting(answering: Callable[..., str]) -> None:
    url = answering(404)
    with pytest.raises(SchemaRegistryRefusedError) as raised:
        _catalog(url).answers()
    assert f"the schema registry at {url} does not answer as a schema registry" in str(raised.value)
    assert "check BRIDGE_SCHEMA_REGISTRY_URL" in str(raised.value)


def test_a_web_page_where_the_registry_should_be_is_refused_naming_the_setting(
    answering: Callable[..., str],
) -> None:
    url = answering(200, b"<html>Welcome</html>")
    with pytest.raises(SchemaRegistryRefusedError) as raised:
        _catalog(url).answers()
    assert f"the schema registry at {url} does not answer as a schema registry (not JSON" in str(raised.value)
    assert "check BRIDGE_SCHEMA_REGISTRY_URL" in str(raised.value)


def test_a_registry_failing_on_its_side_or_unreachable_is_retried(answering: Callable[..., str]) -> None:
    with pytest.raises(SchemaRegistryUnavailableError, match=r"failed \(.*\); retrying"):
        _catalog(answering(503)).answers()
    with pytest.raises(SchemaRegistryUnavailableError, match=re.escape("at http://127.0.0.1:9 is unreachable")):
        _catalog("http://127.0.0.1:9").answers()


def test_a_lookup_refused_mid_term_names_the_url_too() -> None:
    catalog = RegistryCatalog(_Failing(SchemaRegistryError(401, 40101, "unauthorized")), SubjectNaming.TOPIC_RECORD,
                              url="http://registry:8081")
    with pytest.raises(SchemaRegistryRefusedError) as raised:
        catalog(TOPIC, "OrderPlaced")
    assert "the schema registry at http://registry:8081 refused the bridge's login" in str(raised.value)


def test_a_web_page_answering_a_lookup_is_refused_naming_the_setting(answering: Callable[..., str]) -> None:
    url = answering(200, b"<html>Welcome</html>")
    with pytest.raises(SchemaRegistryRefusedError) as raised:
        _catalog(url)(TOPIC, "OrderPlaced")
    assert f"the schema registry at {url} does not answer as a schema registry (not JSON" in str(raised.value)
    assert "check BRIDGE_SCHEMA_REGISTRY_URL" in str(raised.value)
