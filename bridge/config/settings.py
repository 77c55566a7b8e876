"""Every setting as it is loaded: its field, default, range and its own check, and the forms its text takes.

Nothing here is derived or checked against another setting: `BridgeConfig` (`bridge.config.model`) does that,
and derives the sections each part of the bridge is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Final

from pydantic import Field, SecretStr, field_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from bridge.config.choices import (
    Compression,
    DeliveryMode,
    LogLevel,
    PoisonPolicy,
    RecordFormat,
    SubjectNaming,
    ValueFormat,
)
from bridge.config.templates import check_template
from bridge.kafka.client_security import SaslMechanism, SecurityProtocol
from bridge.kafka.producer_settings import is_secret_producer_key
from bridge.layered_settings import LayeredSettings

MIB: Final = 1024 * 1024
_BRIDGE_NAME = re.compile(r"[a-zA-Z0-9._-]{1,100}")

ProducerValue = bool | int | float | str | SecretStr


#: An OpenTelemetry exporter name, as `OTEL_TRACES_EXPORTER` lists them (`otlp`, `console`, `otlp_proto_http`).
_EXPORTER_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")

_DURATION: Final = re.compile(r"^(\d+)([smhdw])$")
_DURATION_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """A duration like 90m, 12h, 7d or 2w; ValueError naming the value otherwise."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration")
    return timedelta(**{_DURATION_UNITS[match.group(2)]: int(match.group(1))})


def parse_start_from(value: str) -> str:
    """`--start-from`: `earliest` or a seq (a whole number from 1), normalised; ValueError otherwise."""
    text = value.strip().lower()
    if text == "earliest":
        return text
    if text.isdigit() and int(text) >= 1:
        return str(int(text))
    raise ValueError(f"{value!r} is neither `earliest` nor a seq")


def _freeze_producer_extra(extra: Mapping[str, ProducerValue]) -> Mapping[str, ProducerValue]:
    frozen: dict[str, ProducerValue] = {}
    for key, value in extra.items():
        if not key or key != key.strip():
            raise ValueError(f"producer setting name {key!r} is empty or has surrounding spaces")
        if isinstance(value, str) and is_secret_producer_key(key):
            value = SecretStr(value)
        frozen[key] = value
    return MappingProxyType(frozen)


class BridgeSettings(LayeredSettings):
    """The bridge's settings, one field each, frozen; `BridgeConfig` is what the bridge uses.

    Constructing it directly uses only the keyword arguments and defaults (no environment), which
    keeps tests deterministic.
    """

    db_url: SecretStr = Field(
        default=SecretStr("sqlite:///.run/outbox.db"), description="SQLAlchemy URL of the outbox"
    )
    bootstrap_servers: str = Field(
        default="127.0.0.1:9092", description="Kafka bootstrap servers, host:port,..."
    )
    bridge_name: str = Field(
        default="default", description="names the watermark, the lease and the DLQ topic"
    )
    topic_template: str = Field(default="outbox.event.{aggregate_type}", description="topic of each event")
    max_in_flight: int = Field(default=10_000, ge=1, le=1_000_000, description="events above the watermark")
    max_in_flight_bytes: int = Field(default=64 * MIB, ge=1024, le=16 * 1024 * MIB, description="their bytes")
    read_batch_size: int = Field(default=1000, ge=1, le=100_000, description="rows per outbox query")
    persist_interval_s: float = Field(
        default=1.0, gt=0, le=3600, description="seconds between watermark writes"
    )
    poll_interval_min_ms: int = Field(
        default=2, ge=1, le=60_000, description="least time between outbox reads once caught up"
    )
    poll_interval_max_ms: int = Field(
        default=1000, ge=1, le=60_000, description="outbox poll interval when idle"
    )
    lease_timeout_s: float = Field(default=10.0, ge=1, le=3600, description="a silent leader loses its lease")
    retention: str | None = Field(
        default=None,
        description="delete published rows older than this (90m, 12h, 7d, 2w); unset keeps every row",
    )
    retention_interval_s: float = Field(
        default=300.0, ge=1, le=86_400, description="seconds between retention passes of the active instance"
    )
    retention_hold_alert_after: str = Field(
        default="6h", description="alert when another bridge name holds retention back this long (or leads no more)"
    )
    start_from: str | None = Field(
        default=None,
        description="where a new, retired or passed-over bridge name starts: earliest or a seq (audited)",
    )
    delivery: DeliveryMode = Field(default=DeliveryMode.AT_LEAST_ONCE, description="at-least-once or exactly-once")
    transaction_max_events: int = Field(
        default=5000, ge=1, le=1_000_000, description="exactly-once: events after which a transaction is committed"
    )
    transaction_interval_ms: int = Field(
        default=100, ge=1, le=600_000, description="exactly-once: age at which an open transaction is committed"
    )
    progress_topic: str = Field(
        default="outbox.progress.{bridge_name}",
        description="exactly-once: compacted topic of the last seq each transaction committed",
    )
    poison_policy: PoisonPolicy = Field(default=PoisonPolicy.HALT, description="on an unpublishable event")
    dead_letter_alert_after: str = Field(
        default="1h", description="alert while a dead letter stays open longer than this"
    )
    startup_alert_after: str = Field(
        default="5m", description="alert when an instance has been starting this long without standing by or leading"
    )
    dlq_topic: str = Field(default="outbox.dlq.{bridge_name}", description="dead-letter topic")
    record_format: RecordFormat = Field(default=RecordFormat.PLAIN, description="plain or cloudevents (binary mode)")
    cloudevents_source: str | None = Field(
        default=None, description="ce_source of every record (cloudevents); unset: urn:outbox-bridge:<bridge name>"
    )
    value_format: ValueFormat = Field(default=ValueFormat.JSON, description="json, or json-schema (a registry)")
    schema_registry_url: str | None = Field(default=None, description="schema registry (Confluent API) for json-schema")
    schema_registry_user: str | None = Field(default=None, min_length=1, description="registry basic-auth user")
    schema_registry_password: SecretStr | None = Field(default=None, description="registry basic-auth password")
    schema_subjects: SubjectNaming = Field(default=SubjectNaming.TOPIC_RECORD, description="subject naming")
    schema_dir: str | None = Field(
        default=None, description="register <dir>/<event_type>.json under each subject; unset: look schemas up"
    )
    traces_exporter: str | None = Field(
        default=None,
        description="OpenTelemetry exporters of the bridge's publish spans (otlp, console, ...); unset or none: off",
    )
    topic_partitions: int = Field(default=6, ge=1, le=10_000, description="partitions of topics it creates")
    replication_factor: int = Field(default=3, ge=1, le=32, description="replicas of topics it creates")
    topic_retention: str = Field(
        default="forever", description="how long topics it creates keep records: forever, or 90m, 12h, 30d, 2w"
    )
    allow_create_topics: bool = Field(default=True, description="create missing topics")
    allow_single_broker: bool = Field(default=False, description="allow replication below 3 (development)")
    metrics_port: int = Field(default=9464, ge=0, le=65535, description="Prometheus port; 0 disables it")
    metrics_host: str = Field(default="127.0.0.1", min_length=1, description="Prometheus listen address")
    shutdown_timeout_s: float = Field(default=30.0, gt=0, le=3600, description="drain time on stop")
    linger_ms: int = Field(default=5, ge=0, le=900_000, description="producer linger.ms")
    batch_size: int = Field(default=MIB, ge=1, le=2_147_483_647, description="producer batch.size in bytes")
    compression: Compression = Field(default=Compression.LZ4, description="producer compression.type")
    delivery_timeout_ms: int = Field(
        default=120_000,
        ge=1000,
        le=2_147_483_647,
        description="producer delivery.timeout.ms: retries end here",
    )
    producer_extra: Mapping[str, ProducerValue] = Field(
        default_factory=lambda: MappingProxyType({}), description="extra librdkafka settings"
    )
    allow_unsafe_producer: bool = Field(default=False, description="accept extras that weaken delivery")
    log_level: LogLevel = Field(default=LogLevel.INFO, description="log level")
    kafka_security_protocol: SecurityProtocol | None = Field(
        default=None, description="librdkafka security.protocol of every Kafka client (PLAINTEXT if unset)"
    )
    kafka_sasl_mechanism: SaslMechanism | None = Field(default=None, description="sasl.mechanism")
    kafka_sasl_username: str | None = Field(default=None, min_length=1, description="sasl.username")
    kafka_sasl_password: SecretStr | None = Field(default=None, description="sasl.password")
    kafka_ssl_ca_location: str | None = Field(
        default=None, min_length=1, description="PEM file of the CA that signed the brokers' certificates"
    )

    @field_validator("db_url")
    @classmethod
    def _db_url_is_sqlalchemy(cls, value: SecretStr) -> SecretStr:
        try:
            url = make_url(value.get_secret_value())
        except ArgumentError:
            raise ValueError("not a SQLAlchemy URL") from None
        try:
            # Loads SQLAlchemy's dialect class only; the database driver is imported when connecting.
            url.get_dialect()
        except NoSuchModuleError:
            raise ValueError(f"SQLAlchemy has no database dialect {url.drivername!r}") from None
        return value

    @field_validator("retention")
    @classmethod
    def _retention(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        if parse_duration(value).total_seconds() == 0:  # ValueError names the value and the accepted forms
            raise ValueError(f"{value!r} would delete every row as soon as it is published; use e.g. 7d")
        return value.strip()

    @field_validator("retention_hold_alert_after", "dead_letter_alert_after", "startup_alert_after")
    @classmethod
    def _alert_after(cls, value: str) -> str:
        if parse_duration(value).total_seconds() == 0:  # ValueError names the value and the accepted forms
            raise ValueError(f"{value!r} would alert at once; use e.g. 1h")
        return value.strip()

    @field_validator("start_from")
    @classmethod
    def _start_from(cls, value: str | None) -> str | None:
        return None if value is None or value.strip() == "" else parse_start_from(value)

    @field_validator("topic_retention")
    @classmethod
    def _topic_retention(cls, value: str) -> str:
        value = value.strip()
        if value.lower() == "forever":
            return "forever"
        if parse_duration(value).total_seconds() == 0:  # ValueError names the value and the accepted forms
            raise ValueError(f"{value!r} would delete every record at once; use forever, or e.g. 30d")
        return value

    @field_validator("cloudevents_source")
    @classmethod
    def _source_is_a_uri_reference(cls, value: str | None) -> str | None:
        if value is None:
            return None
        # A URI-reference (RFC 3986) has no spaces or control characters; anything finer is the consumers' call.
        if not value or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("must be a URI-reference without spaces, e.g. urn:orders or https://shop.example/orders")
        return value

    @field_validator("schema_registry_url")
    @classmethod
    def _registry_url_is_http(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value.strip()):
            raise ValueError("expected http(s)://host:port[/path], e.g. http://127.0.0.1:8081/apis/ccompat/v7")
        return None if value is None else value.strip().rstrip("/")

    @field_validator("schema_dir")
    @classmethod
    def _schema_dir_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_dir():
            raise ValueError("no such directory; give the one holding <event_type>.json schema files")
        return value

    @field_validator("traces_exporter")
    @classmethod
    def _exporters_are_named(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = [name.strip().lower() for name in value.split(",")]
        if not all(_EXPORTER_NAME.fullmatch(name) for name in names) or ("none" in names and len(names) > 1):
            raise ValueError("expected none, or a comma-separated list of exporter names")
        return ",".join(names)

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers_are_listed(cls, value: str) -> str:
        servers = [server.strip() for server in value.split(",")]
        if not all(servers) or any(re.search(r"\s", server) for server in servers):
            raise ValueError("expected a comma-separated list of host:port")
        return ",".join(servers)

    @field_validator("bridge_name")
    @classmethod
    def _bridge_name_is_topic_safe(cls, value: str) -> str:
        # The name goes into the DLQ topic name and the producer's client.id.
        if _BRIDGE_NAME.fullmatch(value) is None:
            raise ValueError("must be 1 to 100 of [a-zA-Z0-9._-]")
        return value

    @field_validator("topic_template")
    @classmethod
    def _topic_template_renders_legal_names(cls, value: str) -> str:
        return check_template(value, "aggregate_type", "x")

    @field_validator("dlq_topic", "progress_topic")
    @classmethod
    def _bridge_topic_templates_are_valid(cls, value: str) -> str:
        return check_template(value, "bridge_name", "x")

    @field_validator("producer_extra")
    @classmethod
    def _producer_extra_is_frozen(cls, value: Mapping[str, ProducerValue]) -> Mapping[str, ProducerValue]:
        return _freeze_producer_extra(value)

    @field_validator("kafka_ssl_ca_location")
    @classmethod
    def _ca_file_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_file():
            raise ValueError("no such file; give the PEM file of the CA that signed the brokers' certificates")
        return value
