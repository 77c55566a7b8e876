"""The registry side of `BRIDGE_VALUE_FORMAT=json-schema`: which subject an event's schema is under, and its id
and validator, asked of the registry through confluent-kafka's `SchemaRegistryClient` (Confluent's REST API,
which Apicurio serves at `/apis/ccompat/v7`).

Subjects follow Confluent's strategies, by `BRIDGE_SCHEMA_SUBJECTS`: `topic-record` (the default,
TopicRecordNameStrategy with the event type as the record name: `<topic>-<event_type>`, one schema per event
type, and a topic may carry several types), `record` (`<event_type>`, the same schema on every topic) or
`topic` (TopicNameStrategy, `<topic>-value`: one schema for every type on the topic). Confluent's deserializer
reads the id from each value, so consumers need no setting for any of them.

Without `BRIDGE_SCHEMA_DIR` the latest version of each subject is used, as it stood when first asked (a later
version is taken after a restart). With it, `<dir>/<event_type>.json` is registered under the subject (the
registry returns the id it already has for the same schema) and used. Imported only when the format is on.

`RegistryCatalog.answers` is the bridge's start-up check: the registry answers the bridge's login before it leads,
so a refused login or a URL with no registry behind it stops it at once, naming the URL and the setting to fix,
instead of at its first event.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bridge.config import SchemaSection, SubjectNaming
from bridge.core.wire_format import schema_prefix
from bridge.errors import SchemaMissingError
from bridge.schemas.checks import schema_check
from bridge.schemas.faults import REQUEST_FAILURES, listing_fault, registry_fault
from bridge.schemas.values import RegisteredSchema


def subject_for(naming: SubjectNaming, topic: str, event_type: str) -> str:
    """The subject an event's schema is registered under."""
    if naming is SubjectNaming.TOPIC:
        return f"{topic}-value"
    if naming is SubjectNaming.RECORD:
        return event_type
    return f"{topic}-{event_type}"


def registry_client(section: SchemaSection) -> SchemaRegistryClient:
    """The client for the configured registry (basic auth when a user is set)."""
    return SchemaRegistryClient(section.client_conf())


class RegistryCatalog:
    """A `SchemaLookup` over a registry: one request per subject (`SchemaValues` keeps the answers). `url` names the
    registry in errors: give it masked."""

    def __init__(self, client: SchemaRegistryClient, naming: SubjectNaming, schema_dir: Path | None = None,
                 url: str = "") -> None:
        self._client = client
        self._naming = naming
        self._dir = schema_dir
        self._where = f"the schema registry at {url}" if url else "the schema registry"

    def answers(self) -> None:
        """The registry lists its subjects to the bridge's login; else `SchemaRegistryRefusedError` when it refuses
        the login or no registry's API answers at the URL, `SchemaRegistryUnavailableError` when it cannot say now."""
        try:
            self._client.get_subjects()
        except REQUEST_FAILURES as exc:
            raise listing_fault(exc).error(self._where) from exc

    def __call__(self, topic: str, event_type: str) -> RegisteredSchema:
        subject = subject_for(self._naming, topic, event_type)
        try:
            if self._dir is None:
                latest = self._client.get_latest_version(subject)
                schema_id, text = latest.schema_id, latest.schema.schema_str
            else:
                text = self._schema_file(subject, event_type)
                schema_id = self._client.register_schema(subject, Schema(text, "JSON"))
        except REQUEST_FAILURES as exc:  # not JSON too: something else answered since the start-up check
            fault = registry_fault(exc, subject)
            if fault is None:
                raise _refused_schema(subject, exc) from exc
            raise fault.error(self._where) from exc
        if schema_id is None or not text:
            raise SchemaMissingError(f"the registry returned no schema for subject {subject}")
        return RegisteredSchema(subject, schema_id, schema_prefix(schema_id), _checker(subject, schema_id, text))

    def _schema_file(self, subject: str, event_type: str) -> str:
        assert self._dir is not None
        path = self._dir / f"{event_type}.json"
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SchemaMissingError(f"no schema for subject {subject}: cannot read {path} ({exc.strerror}); "
                                     "add the event type's JSON Schema there") from exc


def _refused_schema(subject: str, exc: Exception) -> SchemaMissingError:
    """The registry's refusal of one subject's schema (a 4xx other than 401 and 403): each of its events is
    poison, the registry itself is fine."""
    if isinstance(exc, SchemaRegistryError) and exc.http_status_code == 404:
        return SchemaMissingError(f"no schema registered for subject {subject} ({exc}): register the event type's "
                                  "JSON Schema there, or set BRIDGE_SCHEMA_DIR to let the bridge register it")
    # 409 incompatible with the subject's versions, 422 not a valid schema
    return SchemaMissingError(f"the registry refused the schema of subject {subject} ({exc})")


def _checker(subject: str, schema_id: int, text: str) -> Any:
    """The check of a JSON Schema text (`bridge.schemas.checks`): None for a valid value, or why it is not."""
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise SchemaMissingError(f"the schema of subject {subject} (id {schema_id}) is not a valid JSON Schema: "
                                 f"{exc}") from exc
    return schema_check(subject, schema_id, schema)
