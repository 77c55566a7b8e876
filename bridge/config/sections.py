"""The sections of the configuration: each part of the bridge is given the one it uses, not the whole.

The engine and the commands that only read or write the outbox get the database section; every Kafka client
the connection; the producer its own section; the topic guard's policy, the router and the poison gate the topic
section; the daemon's loop its pace and limits; retention its period. `BridgeConfig` derives each once from
the settings as loaded; only `build_daemon` and a command's entry point, which hand the sections out, take
the whole configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bridge.config.choices import Compression, PoisonPolicy, RecordFormat, SubjectNaming
from bridge.config.masking import mask_url
from bridge.config.settings import ProducerValue
from bridge.config.templates import is_legal_topic_name, render_template
from bridge.kafka.producer_settings import ProducerSettings, producer_settings
from bridge.kafka.topics import TopicPolicy


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
    """Which topic each event goes to, in which record format, and how the bridge creates and checks topics."""

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
    record_format: RecordFormat = RecordFormat.PLAIN
    #: `ce_source` of every record in the cloudevents format.
    cloudevents_source: str = ""

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
class SchemaSection:
    """The schema registry of the json-schema value format: where it is, how to log in, how subjects are named
    and, when set, the directory of schemas the bridge registers itself."""

    url: str
    naming: SubjectNaming
    user: str | None = None
    password: SecretStr | None = None
    schema_dir: Path | None = None
    #: Seconds one request may take. The client's own default is no limit, and a lookup runs on the publishing
    #: loop: a registry that hangs would stop acks being handled and let the lease lapse.
    timeout_s: float = 5.0

    def client_conf(self) -> dict[str, Any]:
        """The dict for confluent-kafka's `SchemaRegistryClient`: holds the password in clear, never log it.

        No retries inside the client: the loop retries a failed lookup with its backoff, handling acks between."""
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 0}
        if self.user is not None and self.password is not None:
            conf["basic.auth.user.info"] = f"{self.user}:{self.password.get_secret_value()}"
        return conf


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
