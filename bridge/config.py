"""The bridge's configuration: typed, frozen, validated once at the edge.

`load_config` layers flags over environment variables over a TOML file over defaults, and turns
every validation failure into one ConfigurationError naming the variable, the bad value and what
is accepted. The TOML file uses the field names (`max_in_flight = 5000`) and a `[producer]` table
for extra librdkafka settings; environment variables use the names in `ENV_NAMES`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum, StrEnum
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import quote

from annotated_types import Ge, Gt, Le, Lt
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from bridge.enums import AnyCaseStrEnum
from bridge.errors import ConfigurationError
from bridge.kafka.client_security import (
    SaslMechanism,
    SecurityProtocol,
    connection_settings,
    security_conflicts,
)
from bridge.kafka.producer_settings import (
    MASK,
    ProducerSettings,
    check_extras,
    is_secret_producer_key,
    producer_settings,
)
from bridge.kafka.topics import TopicPolicy
from bridge.layered_settings import LayeredSettings, TomlFile

log = logging.getLogger(__name__)

CONFIG_FILE_ENV: Final = "OUTBOX_CONFIG_FILE"
MIB: Final = 1024 * 1024

ENV_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "db_url": "OUTBOX_DB_URL",
        "bootstrap_servers": "KAFKA_BOOTSTRAP_SERVERS",
        "bridge_name": "BRIDGE_NAME",
        "topic_template": "BRIDGE_TOPIC_TEMPLATE",
        "max_in_flight": "BRIDGE_MAX_IN_FLIGHT",
        "max_in_flight_bytes": "BRIDGE_MAX_IN_FLIGHT_BYTES",
        "read_batch_size": "BRIDGE_READ_BATCH_SIZE",
        "persist_interval_s": "BRIDGE_PERSIST_INTERVAL_S",
        "poll_interval_min_ms": "BRIDGE_POLL_INTERVAL_MIN_MS",
        "poll_interval_max_ms": "BRIDGE_POLL_INTERVAL_MAX_MS",
        "lease_timeout_s": "BRIDGE_LEASE_TIMEOUT_S",
        "poison_policy": "BRIDGE_POISON_POLICY",
        "dlq_topic": "BRIDGE_DLQ_TOPIC",
        "topic_partitions": "BRIDGE_TOPIC_PARTITIONS",
        "replication_factor": "BRIDGE_REPLICATION_FACTOR",
        "topic_retention": "BRIDGE_TOPIC_RETENTION",
        "allow_create_topics": "BRIDGE_ALLOW_CREATE_TOPICS",
        "allow_single_broker": "BRIDGE_ALLOW_SINGLE_BROKER",
        "metrics_port": "BRIDGE_METRICS_PORT",
        "metrics_host": "BRIDGE_METRICS_HOST",
        "shutdown_timeout_s": "BRIDGE_SHUTDOWN_TIMEOUT_S",
        "linger_ms": "BRIDGE_LINGER_MS",
        "batch_size": "BRIDGE_BATCH_SIZE",
        "compression": "BRIDGE_COMPRESSION",
        "delivery_timeout_ms": "BRIDGE_DELIVERY_TIMEOUT_MS",
        "producer_extra": "BRIDGE_PRODUCER_EXTRA",
        "allow_unsafe_producer": "BRIDGE_ALLOW_UNSAFE_PRODUCER",
        "log_level": "BRIDGE_LOG_LEVEL",
        "retention": "BRIDGE_RETENTION",
        "retention_interval_s": "BRIDGE_RETENTION_INTERVAL_S",
        "retention_hold_alert_after": "BRIDGE_RETENTION_HOLD_ALERT_AFTER",
        "dead_letter_alert_after": "BRIDGE_DEAD_LETTER_ALERT_AFTER",
        "start_from": "BRIDGE_START_FROM",
        "startup_alert_after": "BRIDGE_STARTUP_ALERT_AFTER",
        "kafka_security_protocol": "KAFKA_SECURITY_PROTOCOL",
        "kafka_sasl_mechanism": "KAFKA_SASL_MECHANISM",
        "kafka_sasl_username": "KAFKA_SASL_USERNAME",
        "kafka_sasl_password": "KAFKA_SASL_PASSWORD",
        "kafka_ssl_ca_location": "KAFKA_SSL_CA_LOCATION",
    }
)
TOML_PRODUCER_TABLE: Final = "producer"
EXTRA_ENV_NAME: Final = "BRIDGE_PRODUCER_EXTRA"

LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_BRIDGE_NAME = re.compile(r"[a-zA-Z0-9._-]{1,100}")
_SECRET_URL_QUERY_KEY = re.compile(r"password|pwd|secret|token|odbc_connect", re.IGNORECASE)

ProducerValue = bool | int | float | str | SecretStr


class PoisonPolicy(StrEnum):
    """What the bridge does with an event that can never be published as it is."""

    HALT = "halt"
    DEAD_LETTER = "dead-letter"


class Compression(StrEnum):
    """Producer compression codecs (librdkafka `compression.type`)."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


class LogLevel(AnyCaseStrEnum):
    """Log levels of the standard logging module."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


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


def is_legal_topic_name(name: str) -> bool:
    """Whether Kafka accepts name as a topic: 1 to 249 of `[a-zA-Z0-9._-]`, and not `.` or `..`."""
    return LEGAL_TOPIC_NAME.fullmatch(name) is not None and name not in (".", "..")


def render_template(template: str, placeholder: str, value: str) -> str:
    """Replace `{placeholder}` in template with value (templates are validated to have no other fields)."""
    return template.replace("{" + placeholder + "}", value)


def mask_url(url: str) -> str:
    """Render a SQLAlchemy URL with its password and credential-like query parameters masked."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        # Unparseable: keep the scheme, hide everything up to the last "@", where credentials would be.
        return re.sub(r"^([\w+.-]+://)?.*@", lambda m: f"{m.group(1) or ''}***@", url, flags=re.DOTALL)
    query = {key: MASK if _SECRET_URL_QUERY_KEY.search(key) else value for key, value in parsed.query.items()}
    # SQLAlchemy URL-quotes query values; show the mask as written rather than as %2A%2A...
    return parsed.set(query=query).render_as_string(hide_password=True).replace(quote(MASK), MASK)


def _template_fields(template: str) -> set[str]:
    fields = set()
    for _, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        if spec or conversion or not field:
            raise ValueError(
                f"placeholder {{{field}{'!' + conversion if conversion else ''}:{spec}}} is not allowed"
            )
        fields.add(field)
    return fields


def _check_template(template: str, placeholder: str, example: str) -> str:
    try:
        fields = _template_fields(template)
    except ValueError as exc:  # unbalanced braces, format specs
        raise ValueError(f"not a valid template ({exc}); the only placeholder is {{{placeholder}}}") from None
    if fields - {placeholder}:
        unknown = ", ".join(sorted(f"{{{f}}}" for f in fields - {placeholder}))
        raise ValueError(f"unknown placeholder {unknown}; the only placeholder is {{{placeholder}}}")
    rendered = render_template(template, placeholder, example)
    if not is_legal_topic_name(rendered):
        raise ValueError(
            f"renders topic names such as {rendered!r}, which Kafka refuses: "
            "a topic name is 1 to 249 of [a-zA-Z0-9._-]"
        )
    return template


def _freeze_producer_extra(extra: Mapping[str, ProducerValue]) -> Mapping[str, ProducerValue]:
    frozen: dict[str, ProducerValue] = {}
    for key, value in extra.items():
        if not key or key != key.strip():
            raise ValueError(f"producer setting name {key!r} is empty or has surrounding spaces")
        if isinstance(value, str) and is_secret_producer_key(key):
            value = SecretStr(value)
        frozen[key] = value
    return MappingProxyType(frozen)


# ------------------------------------------------------------------------------------------- sections
# Each part of the bridge is given the section it uses, never the whole configuration.


@dataclass(frozen=True, slots=True)
class DatabaseSection:
    """Where the outbox is, and which watermark and lease in it belong to this bridge."""

    url: SecretStr
    bridge_name: str

    @property
    def url_text(self) -> str:
        """The URL with its password, for the engine only; log `masked_url` instead."""
        return self.url.get_secret_value()

    @property
    def masked_url(self) -> str:
        return mask_url(self.url.get_secret_value())


@dataclass(frozen=True, slots=True)
class KafkaConnection:
    """How every Kafka client of the bridge connects: bootstrap servers and the security settings.

    The producer, the topic checks' admin client, `topics` and `replay` all get `client_conf()`, so a
    secured cluster needs its settings once.
    """

    bootstrap_servers: str
    security: Mapping[str, Any]  # librdkafka keys; credentials as SecretStr

    def client_conf(self) -> dict[str, Any]:
        """The dict for any confluent-kafka client: holds credentials in clear, never log it."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        for key, value in self.security.items():
            conf[key] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return conf

    @property
    def principal(self) -> str:
        """The principal the brokers see, for error messages: `User:<name>`, or what authenticates instead."""
        user = self.security.get("sasl.username")
        if user:
            return f"User:{user}"
        if str(self.security.get("security.protocol", "plaintext")).lower().startswith("sasl"):
            return "a SASL user (sasl.username unset)"
        return "User:ANONYMOUS (no SASL; set KAFKA_SECURITY_PROTOCOL=SASL_SSL and KAFKA_SASL_USERNAME)"


@dataclass(frozen=True, slots=True)
class ProducerSection:
    """What the Kafka producer is made from (satisfies `bridge.kafka.producer_settings.ProducerConfig`)."""

    bridge_name: str
    bootstrap_servers: str
    client_security: Mapping[str, Any]
    linger_ms: int
    batch_size: int
    compression: Compression
    delivery_timeout_ms: int
    max_in_flight: int
    max_in_flight_bytes: int
    producer_extra: Mapping[str, ProducerValue]
    allow_unsafe_producer: bool

    def settings(self, client_id: str | None = None) -> ProducerSettings:
        """The librdkafka settings with the warnings about allowed unsafe extras (logged here)."""
        return producer_settings(self, client_id=client_id)

    def as_librdkafka_dict(self, client_id: str | None = None) -> dict[str, Any]:
        """The dict for `confluent_kafka.Producer`: holds credentials in clear, never log it."""
        return self.settings(client_id).conf


@dataclass(frozen=True, slots=True)
class TopicSection:
    """Which topic each event goes to, and how the bridge creates and checks topics."""

    bootstrap_servers: str
    topic_template: str
    dlq_topic_name: str
    bridge_name: str
    partitions: int
    replication_factor: int
    allow_create: bool
    allow_single_broker: bool
    retention_ms: int  # of topics it creates; -1 keeps every record
    outbox_retention: timedelta | None  # BRIDGE_RETENTION, named in the topics' history findings

    def policy(self) -> TopicPolicy:
        """What the topic guard creates and checks topics against."""
        return TopicPolicy(self.partitions, self.replication_factor, self.allow_single_broker,
                           retention_ms=self.retention_ms, outbox_retention=self.outbox_retention)

    def topic_for(self, aggregate_type: str) -> str:
        """The topic for an event of aggregate_type; ValueError if it would not be a legal topic name."""
        topic = render_template(self.topic_template, "aggregate_type", aggregate_type)
        if not aggregate_type or not is_legal_topic_name(topic):
            raise ValueError(
                f"aggregate_type {aggregate_type!r} gives topic {topic!r}, which Kafka refuses "
                "(1 to 249 of [a-zA-Z0-9._-])"
            )
        return topic


@dataclass(frozen=True, slots=True)
class LoopSection:
    """The publishing loop's pace and limits."""

    max_in_flight: int
    max_in_flight_bytes: int
    read_batch_size: int
    persist_interval_s: float
    poll_interval_min_s: float
    poll_interval_max_s: float
    lease_timeout_s: float
    shutdown_timeout_s: float
    poison_policy: PoisonPolicy
    #: Where a name starts when rows above its watermark are gone, or it is new or retired (`earliest`, a seq).
    start_from: str | None = None
    #: An open dead letter older than this is alerted on (the gauge `outbox_dead_letter_alert_after_seconds`).
    dead_letter_alert_after_s: float = 3600.0
    #: Starting (neither standing by nor leading) longer than this is alerted on (`outbox_startup_seconds`).
    startup_alert_after_s: float = 300.0


@dataclass(frozen=True, slots=True)
class RetentionSection:
    """Deleting published rows while leading: rows older than `period`, every `interval_s`."""

    period: timedelta
    interval_s: float
    #: Another name holding retention back longer than this is alerted on (`outbox_retention_held_back_seconds`).
    hold_alert_after_s: float = 6 * 3600.0


class BridgeConfig(LayeredSettings):
    """Everything the bridge daemon needs to know, frozen; build it with `load_config`.

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
        default=5, ge=1, le=60_000, description="least time between outbox reads once caught up"
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
    poison_policy: PoisonPolicy = Field(default=PoisonPolicy.HALT, description="on an unpublishable event")
    dead_letter_alert_after: str = Field(
        default="1h", description="alert while a dead letter stays open longer than this"
    )
    startup_alert_after: str = Field(
        default="5m", description="alert when an instance has been starting this long without standing by or leading"
    )
    dlq_topic: str = Field(default="outbox.dlq.{bridge_name}", description="dead-letter topic")
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

    @property
    def topic_retention_ms(self) -> int:
        """`retention.ms` of topics the bridge creates: -1 (every record kept) for `forever`."""
        if self.topic_retention == "forever":
            return -1
        return int(parse_duration(self.topic_retention).total_seconds() * 1000)

    @property
    def retention_period(self) -> timedelta | None:
        """`retention` as a timedelta, or None when rows are kept."""
        return parse_duration(self.retention) if self.retention else None

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
        return _check_template(value, "aggregate_type", "x")

    @field_validator("dlq_topic")
    @classmethod
    def _dlq_topic_template_is_valid(cls, value: str) -> str:
        return _check_template(value, "bridge_name", "x")

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

    @model_validator(mode="after")
    def _security_agrees(self) -> BridgeConfig:
        env = ENV_NAMES
        sasl = self.kafka_security_protocol in (SecurityProtocol.SASL_SSL, SecurityProtocol.SASL_PLAINTEXT)
        if (self.kafka_sasl_username is None) != (self.kafka_sasl_password is None):
            given, missing = (
                ("kafka_sasl_username", "kafka_sasl_password") if self.kafka_sasl_password is None
                else ("kafka_sasl_password", "kafka_sasl_username")
            )
            raise ValueError(f"{env[given]} is set but {env[missing]} is not; give both, or neither")
        if (self.kafka_sasl_username is not None or self.kafka_sasl_mechanism is not None) and not sasl:
            raise ValueError(
                f"{env['kafka_sasl_username']}/{env['kafka_sasl_mechanism']} need "
                f"{env['kafka_security_protocol']}=SASL_SSL (or SASL_PLAINTEXT); it is "
                f"{self.kafka_security_protocol.value if self.kafka_security_protocol else 'unset (PLAINTEXT)'}"
            )
        conflicts = security_conflicts(self._typed_security(), self.producer_extra)
        if conflicts:
            raise ValueError(
                f"{EXTRA_ENV_NAME} sets {', '.join(conflicts)}, which the KAFKA_SECURITY_PROTOCOL/KAFKA_SASL_*/"
                "KAFKA_SSL_CA_LOCATION settings also set; give each in one place"
            )
        return self

    def _typed_security(self) -> dict[str, Any]:
        typed: dict[str, Any] = {}
        if self.kafka_security_protocol is not None:
            typed["security.protocol"] = self.kafka_security_protocol.value
        if self.kafka_sasl_mechanism is not None:
            typed["sasl.mechanism"] = self.kafka_sasl_mechanism.value
        if self.kafka_sasl_username is not None:
            typed["sasl.username"] = self.kafka_sasl_username
        if self.kafka_sasl_password is not None:
            typed["sasl.password"] = self.kafka_sasl_password
        if self.kafka_ssl_ca_location is not None:
            typed["ssl.ca.location"] = str(Path(self.kafka_ssl_ca_location).expanduser())
        return typed

    @model_validator(mode="after")
    def _settings_agree(self) -> BridgeConfig:
        env = ENV_NAMES
        if self.poll_interval_min_ms > self.poll_interval_max_ms:
            raise ValueError(
                f"{env['poll_interval_min_ms']}={self.poll_interval_min_ms} is above "
                f"{env['poll_interval_max_ms']}={self.poll_interval_max_ms}; swap them or widen the range"
            )
        if self.persist_interval_s * 2 >= self.lease_timeout_s:
            raise ValueError(
                f"{env['persist_interval_s']}={self.persist_interval_s:g} is half or more of "
                f"{env['lease_timeout_s']}={self.lease_timeout_s:g}: the lease is renewed when the watermark "
                "is persisted, so one slow renewal would let it lapse while this instance still sends. "
                "Persist at least twice per lease timeout"
            )
        if self.linger_ms >= self.delivery_timeout_ms:
            raise ValueError(
                f"{env['linger_ms']}={self.linger_ms} must be below "
                f"{env['delivery_timeout_ms']}={self.delivery_timeout_ms} (librdkafka refuses it otherwise)"
            )
        if self.replication_factor < 3 and not self.allow_single_broker:
            raise ValueError(
                f"{env['replication_factor']}={self.replication_factor} cannot keep acknowledged events "
                "through a broker failure (min.insync.replicas is replication factor - 1); use 3 or more, "
                f"or set {env['allow_single_broker']}=true for a development cluster"
            )
        if not is_legal_topic_name(self.dlq_topic_name):
            raise ValueError(
                f"{env['dlq_topic']}={self.dlq_topic!r} with {env['bridge_name']}={self.bridge_name!r} "
                f"renders {self.dlq_topic_name!r}, which Kafka refuses: a topic name is 1 to 249 "
                "of [a-zA-Z0-9._-]"
            )
        if self.topic_for_pattern().fullmatch(self.dlq_topic_name):
            raise ValueError(
                f"{env['dlq_topic']} renders {self.dlq_topic_name!r}, which is also an event topic of "
                f"{env['topic_template']}={self.topic_template!r}; choose a dead-letter topic outside it"
            )
        return self

    @property
    def dlq_topic_name(self) -> str:
        """The dead-letter topic, with the bridge name filled in."""
        return render_template(self.dlq_topic, "bridge_name", self.bridge_name)

    @property
    def min_insync_replicas(self) -> int:
        """`min.insync.replicas` for topics the bridge creates: replication factor - 1, at least 1."""
        return max(1, self.replication_factor - 1)

    def topic_for(self, aggregate_type: str) -> str:
        """The topic for an event of aggregate_type; ValueError if it would not be a legal topic name."""
        return self.topics.topic_for(aggregate_type)

    def topic_for_pattern(self) -> re.Pattern[str]:
        """A regular expression matching every topic the template can produce."""
        literal_parts = self.topic_template.split("{aggregate_type}")
        return re.compile("[a-zA-Z0-9._-]+".join(re.escape(part) for part in literal_parts))

    # -------------------------------------------------------------------------------------- sections

    @property
    def database(self) -> DatabaseSection:
        return DatabaseSection(url=self.db_url, bridge_name=self.bridge_name)

    @property
    def kafka(self) -> KafkaConnection:
        """Bootstrap and security settings of every Kafka client (typed settings, and security extras)."""
        return KafkaConnection(
            bootstrap_servers=self.bootstrap_servers,
            security=MappingProxyType(connection_settings(self._typed_security(), self.producer_extra)),
        )

    @property
    def client_security(self) -> Mapping[str, Any]:
        """The security settings of every Kafka client (so the whole configuration is a ProducerConfig too)."""
        return self.kafka.security

    @property
    def producer(self) -> ProducerSection:
        return ProducerSection(
            bridge_name=self.bridge_name,
            bootstrap_servers=self.bootstrap_servers,
            client_security=self.kafka.security,
            linger_ms=self.linger_ms,
            batch_size=self.batch_size,
            compression=self.compression,
            delivery_timeout_ms=self.delivery_timeout_ms,
            max_in_flight=self.max_in_flight,
            max_in_flight_bytes=self.max_in_flight_bytes,
            producer_extra=self.producer_extra,
            allow_unsafe_producer=self.allow_unsafe_producer,
        )

    @property
    def topics(self) -> TopicSection:
        return TopicSection(
            bootstrap_servers=self.bootstrap_servers,
            topic_template=self.topic_template,
            dlq_topic_name=self.dlq_topic_name,
            bridge_name=self.bridge_name,
            partitions=self.topic_partitions,
            replication_factor=self.replication_factor,
            allow_create=self.allow_create_topics,
            allow_single_broker=self.allow_single_broker,
            retention_ms=self.topic_retention_ms,
            outbox_retention=self.retention_period,
        )

    @property
    def loop(self) -> LoopSection:
        return LoopSection(
            max_in_flight=self.max_in_flight,
            max_in_flight_bytes=self.max_in_flight_bytes,
            read_batch_size=self.read_batch_size,
            persist_interval_s=self.persist_interval_s,
            poll_interval_min_s=self.poll_interval_min_ms / 1000,
            poll_interval_max_s=self.poll_interval_max_ms / 1000,
            lease_timeout_s=self.lease_timeout_s,
            shutdown_timeout_s=self.shutdown_timeout_s,
            poison_policy=self.poison_policy,
            start_from=self.start_from,
            dead_letter_alert_after_s=parse_duration(self.dead_letter_alert_after).total_seconds(),
            startup_alert_after_s=parse_duration(self.startup_alert_after).total_seconds(),
        )

    @property
    def retention_section(self) -> RetentionSection | None:
        """Retention while leading, or None when every row is kept."""
        period = self.retention_period
        return None if period is None else RetentionSection(
            period=period, interval_s=self.retention_interval_s,
            hold_alert_after_s=parse_duration(self.retention_hold_alert_after).total_seconds())

    def masked(self) -> dict[str, Any]:
        """Every setting as plain values for the start-up log, with credentials masked."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name == "db_url":
                value = mask_url(self.db_url.get_secret_value())
            elif isinstance(value, SecretStr):
                value = MASK
            elif name == "producer_extra":
                value = {k: MASK if isinstance(v, SecretStr) else v for k, v in self.producer_extra.items()}
            elif isinstance(value, Enum):
                value = value.value
            out[name] = value
        return out


def _env_values(env: Mapping[str, str]) -> dict[str, Any]:
    """The settings given as environment variables (names from ENV_NAMES); ConfigurationError for a
    variable that is set but empty, which is a mistake (`KAFKA_BOOTSTRAP_SERVERS=$UNSET_VAR`), not a
    request for the default."""
    values: dict[str, Any] = {}
    empty: list[str] = []
    for name, env_name in ENV_NAMES.items():
        raw = env.get(env_name)
        if raw is None:
            continue
        if raw.strip() == "":
            empty.append(name)
            continue
        values[name] = _decode_json_object(env_name, raw) if name == "producer_extra" else raw
    if empty:
        raise ConfigurationError("invalid configuration:\n  " + "\n  ".join(_empty_refusal(name) for name in empty))
    return values


def _empty_refusal(name: str) -> str:
    field = BridgeConfig.model_fields[name]
    default = field.get_default(call_default_factory=True)
    shown = "unset" if default is None else repr(default.value if isinstance(default, Enum) else default)
    if name == "db_url":
        shown = repr(mask_url(default.get_secret_value()))
    return (
        f"{ENV_NAMES[name]}='' (from the environment) is refused: it is set but empty; give a value "
        f"({_accepted(name)}) or unset it to use the default ({shown})"
    )


def _decode_json_object(env_name: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f'{env_name} is not valid JSON ({exc}); expected an object such as {{"sasl.mechanism": "PLAIN"}}'
        ) from None
    if not isinstance(value, dict):
        raise ConfigurationError(
            f'{env_name} must be a JSON object like {{"sasl.mechanism": "PLAIN"}}, not {type(value).__name__}'
        )
    return value


class _TomlFileSource(TomlFile):
    """The TOML file: field names at the top level, `[producer]` for extra librdkafka settings."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        data = super()._read_file(file_path)
        allowed = (set(ENV_NAMES) - {"producer_extra"}) | {TOML_PRODUCER_TABLE}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ConfigurationError(
                f"configuration file {file_path}: unknown key {', '.join(map(repr, unknown))}; "
                f"known keys: {', '.join(sorted(allowed))}"
            )
        if TOML_PRODUCER_TABLE in data:
            if not isinstance(data[TOML_PRODUCER_TABLE], dict):
                raise ConfigurationError(
                    f"configuration file {file_path}: '{TOML_PRODUCER_TABLE}' must be a table of librdkafka "
                    'settings, e.g. [producer] followed by "sasl.mechanism" = "PLAIN"'
                )
            data["producer_extra"] = data.pop(TOML_PRODUCER_TABLE)
        return data


def load_config(
    flags: Mapping[str, Any] | None = None,
    toml_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> BridgeConfig:
    """Build the configuration from flags > environment > TOML file > defaults, or raise ConfigurationError.

    flags are keyed by field name (None values are ignored, as for unset command-line options); env
    defaults to `os.environ`; the TOML path defaults to `$OUTBOX_CONFIG_FILE`.
    """
    env = os.environ if env is None else env
    flag_values = _flag_values(flags or {})
    path, path_origin = (
        (toml_path, "argument") if toml_path is not None else (env.get(CONFIG_FILE_ENV), CONFIG_FILE_ENV)
    )
    if path is not None and not str(path).strip():
        raise ConfigurationError(
            f"{CONFIG_FILE_ENV if path_origin == CONFIG_FILE_ENV else '--config'} is set but empty; name a TOML "
            "file or unset it to read none"
        )
    if path and not Path(path).expanduser().is_file():
        raise ConfigurationError(f"configuration file {path} (from {path_origin}) does not exist")
    _warn_unknown_env(env)

    toml_values = _TomlFileSource(BridgeConfig, toml_file=Path(path) if path else None)()
    layers = [
        (toml_values, f"TOML file {path}"),
        (_env_values(env), "the environment"),
        (flag_values, "a flag"),
    ]
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for values, origin in layers:  # lowest precedence first
        for name, value in values.items():
            if name == "producer_extra" and name in merged:
                # Extras merge key by key, so a file can hold the SASL setup and the environment one override.
                value = {**merged[name], **value}
            merged[name] = value
            origins[name] = origin
    try:
        config = BridgeConfig(**merged)
    except ValidationError as exc:
        raise ConfigurationError(_describe_errors(exc, origins)) from None
    # Unsafe producer extras are refused here too, so every command fails early, not only `run`.
    check_extras(config.producer_extra, allow_unsafe=config.allow_unsafe_producer)
    return config


def _flag_values(flags: Mapping[str, Any]) -> dict[str, Any]:
    values = {name.replace("-", "_"): value for name, value in flags.items() if value is not None}
    unknown = sorted(set(values) - set(ENV_NAMES))
    if unknown:
        raise ConfigurationError(
            f"unknown setting {', '.join(map(repr, unknown))}; known: {', '.join(ENV_NAMES)}"
        )
    return values


def _warn_unknown_env(env: Mapping[str, str]) -> None:
    # A misspelt variable would otherwise be silently ignored in favour of the default.
    known = set(ENV_NAMES.values()) | {CONFIG_FILE_ENV}
    for name in sorted(env):
        if name.startswith("BRIDGE_") and name not in known:
            log.warning("ignoring unknown environment variable %s; known: %s", name, ", ".join(sorted(known)))


def _describe_errors(exc: ValidationError, origins: Mapping[str, str]) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        message = error["msg"].removeprefix("Value error, ")
        if not loc:  # a check across several settings: its message names them
            lines.append(message)
            continue
        name = str(loc[0])
        setting = ENV_NAMES.get(name, name) + "".join(f"[{part}]" for part in loc[1:])
        origin = f" (from {origins[name]})" if name in origins else ""
        value = _masked_input(name, error.get("input"))
        lines.append(f"{setting}={value}{origin} is refused: {message}; accepted: {_accepted(name)}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _masked_input(name: str, value: Any) -> str:
    if name == "db_url" and isinstance(value, str | SecretStr):
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        return repr(mask_url(raw))
    if name == "kafka_sasl_password":
        return repr(MASK)
    if name == "producer_extra" and isinstance(value, Mapping):
        return repr({k: MASK if is_secret_producer_key(str(k)) else v for k, v in value.items()})
    return repr(value.value if isinstance(value, Enum) else value)


_ACCEPTED_TEXT: Final[Mapping[str, str]] = MappingProxyType(
    {
        "db_url": "a SQLAlchemy URL such as postgresql+psycopg://user:password@host:5432/db",
        "bootstrap_servers": "a comma-separated list of host:port",
        "bridge_name": "1 to 100 of [a-zA-Z0-9._-]",
        "topic_template": "a legal topic name, may contain {aggregate_type}: outbox.event.{aggregate_type}",
        "dlq_topic": "a legal topic name, may contain {bridge_name}: outbox.dlq.{bridge_name}",
        "producer_extra": "a table/JSON object of librdkafka settings with string, number or boolean values",
        "metrics_host": "a host name or IP address to listen on",
        "retention": "a positive number and a unit (s, m, h, d, w), e.g. 90m, 12h, 7d, 2w; unset keeps every row",
        "retention_hold_alert_after": "a positive number and a unit (s, m, h, d, w), e.g. 6h",
        "dead_letter_alert_after": "a positive number and a unit (s, m, h, d, w), e.g. 1h",
        "startup_alert_after": "a positive number and a unit (s, m, h, d, w), e.g. 5m",
        "start_from": "earliest (the oldest row still in the outbox) or a seq, e.g. 1201",
        "topic_retention": "forever (every record kept: retention.ms=-1), or a positive number and a unit "
                           "(s, m, h, d, w), e.g. 30d, 2w",
    }
)


def _accepted(name: str) -> str:
    if name in _ACCEPTED_TEXT:
        return _ACCEPTED_TEXT[name]
    field = BridgeConfig.model_fields.get(name)
    if field is None:
        return "see the documentation"
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(str(member.value) for member in annotation)
    if annotation is bool:
        return "true or false"
    kind = "an integer" if annotation is int else "a number"
    low = next((f">= {c.ge}" for c in field.metadata if isinstance(c, Ge)), "")
    low = low or next((f"> {c.gt}" for c in field.metadata if isinstance(c, Gt)), "")
    high = next((f"<= {c.le}" for c in field.metadata if isinstance(c, Le)), "")
    high = high or next((f"< {c.lt}" for c in field.metadata if isinstance(c, Lt)), "")
    return " and ".join(part for part in (f"{kind} {low}".strip(), high) if part)
