"""The doctor's schema registry check, on confluent-kafka's in-memory registry client: reachable, one line per
event type naming its subject, a type without a schema failed with the fix, a refused login, an unreachable
registry and a URL answering with something other than JSON failed with theirs; nothing at all for plain json
values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka.schema_registry", reason="needs the schema-registry extra")

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bridge.config import SubjectNaming, load_config
from bridge.doctor.checklist import Verdict
from bridge.doctor.database import DatabaseChecks, OutboxDatabase
from bridge.doctor.registry import RegistryChecks, subject_checks

pytestmark = pytest.mark.unit

URL = "http://127.0.0.1:28081/apis/ccompat/v7"
KINDS = [("outbox.event.order", "OrderPlaced"), ("outbox.event.order", "OrderShipped")]


def _registry() -> SchemaRegistryClient:
    client = MockSchemaRegistryClient({"url": "mock://"})
    client.register_schema("outbox.event.order-OrderPlaced", Schema('{"type": "object"}', "JSON"))
    return client


def test_each_event_type_is_checked_under_its_subject() -> None:
    checks = subject_checks(_registry(), URL, SubjectNaming.TOPIC_RECORD, None, KINDS)
    assert [c.verdict for c in checks] == [Verdict.OK, Verdict.OK, Verdict.FAILED]
    assert checks[0].summary.startswith(f"reachable at {URL}")
    assert "subject outbox.event.order-OrderPlaced has a schema" in checks[1].summary
    assert "no schema under subject outbox.event.order-OrderShipped" in checks[2].summary
    assert checks[2].fix is not None and "OrderShipped.json" in checks[2].fix


def test_a_schema_file_the_bridge_registers_counts(tmp_path: Path) -> None:
    (tmp_path / "OrderShipped.json").write_text('{"type": "object"}')
    checks = subject_checks(_registry(), URL, SubjectNaming.TOPIC_RECORD, tmp_path, KINDS)
    assert [c.verdict for c in checks] == [Verdict.OK, Verdict.OK, Verdict.OK]
    assert "the bridge registers" in checks[2].summary


class _Refusing(MockSchemaRegistryClient):
    def __init__(self, error: Exception) -> None:
        super().__init__({"url": "mock://"})
        self.error = error

    def get_subjects(self, *args: object, **kwargs: object) -> list[str]:
        raise self.error


def test_a_refused_login_names_the_credentials() -> None:
    [check] = subject_checks(_Refusing(SchemaRegistryError(401, 40101, "unauthorized")), URL,
                             SubjectNaming.TOPIC_RECORD, None, KINDS)
    assert check.verdict is Verdict.FAILED and check.fix is not None and "BRIDGE_SCHEMA_REGISTRY_USER" in check.fix


def test_an_unreachable_registry_is_failed_with_the_url_to_check() -> None:
    client = SchemaRegistryClient({"url": "http://127.0.0.1:9", "max.retries": 0})
    [check] = subject_checks(client, "http://127.0.0.1:9", SubjectNaming.TOPIC_RECORD, None, KINDS)
    assert check.verdict is Verdict.FAILED and "unreachable" in check.summary
    assert check.fix is not None and "BRIDGE_SCHEMA_REGISTRY_URL" in check.fix


def test_a_page_that_is_not_json_is_failed_as_no_registry_naming_the_url_to_check() -> None:
    not_json = json.JSONDecodeError("Expecting value", "<html>Welcome</html>", 0)  # what the client's decoding raises
    [check] = subject_checks(_Refusing(not_json), URL, SubjectNaming.TOPIC_RECORD, None, KINDS)
    assert check.verdict is Verdict.FAILED
    assert check.summary.startswith(f"{URL} does not answer as a schema registry (not JSON")
    assert check.fix is not None and "BRIDGE_SCHEMA_REGISTRY_URL" in check.fix


def test_an_unreadable_outbox_skips_the_event_types() -> None:
    checks = subject_checks(_registry(), URL, SubjectNaming.TOPIC_RECORD, None, None)
    assert [c.verdict for c in checks] == [Verdict.OK, Verdict.SKIPPED]


def test_plain_json_values_add_no_check() -> None:
    config = load_config(env={})
    database = DatabaseChecks(config, OutboxDatabase(config.db_url, connect_timeout_s=1))
    assert RegistryChecks(config, database).registry() == []
