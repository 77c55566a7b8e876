"""`BridgeConfig`: the settings checked against each other, and the sections derived from them once.

Each section is derived on first use and kept: the configuration is frozen, so it cannot go stale (a
`model_copy` with changes derives its own).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Self

from pydantic import model_validator

from bridge.config.choices import DeliveryMode, RecordFormat, ValueFormat
from bridge.config.env_names import ENV_NAMES, EXTRA_ENV_NAME
from bridge.config.masking import masked_settings
from bridge.config.sections import (
    DatabaseSection,
    KafkaConnection,
    LoopSection,
    ProducerSection,
    RetentionSection,
    SchemaSection,
    TopicSection,
)
from bridge.config.settings import BridgeSettings, parse_duration
from bridge.config.templates import is_legal_topic_name, render_template, topic_pattern
from bridge.kafka.client_security import SecurityProtocol, connection_settings, security_conflicts
from bridge.kafka.transaction_policy import BROKER_TRANSACTION_MAX_TIMEOUT_MS, TransactionPolicy, policy_for


class BridgeConfig(BridgeSettings):
    """Everything the bridge daemon needs to know, frozen; build it with `load_config`.

    Constructing it directly uses only the keyword arguments and defaults (no environment), which
    keeps tests deterministic.
    """

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

    def _registry_agrees(self) -> None:
        env = ENV_NAMES
        registry = ("schema_registry_url", "schema_registry_user", "schema_registry_password", "schema_dir")
        if self.value_format is not ValueFormat.JSON_SCHEMA:
            given = [env[name] for name in registry if getattr(self, name) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} set but {env['value_format']}={self.value_format.value}: "
                                 f"set {env['value_format']}=json-schema to use a registry, or unset them")
            return
        if self.schema_registry_url is None:
            raise ValueError(f"{env['value_format']}=json-schema needs {env['schema_registry_url']}")
        if (self.schema_registry_user is None) != (self.schema_registry_password is None):
            raise ValueError(f"give both {env['schema_registry_user']} and {env['schema_registry_password']}, "
                             "or neither")
        if self.schema_registry_user is not None and "@" in self.schema_registry_url.split("/")[2]:
            raise ValueError(f"{env['schema_registry_url']} carries user:password@ and {env['schema_registry_user']} "
                             "is set too: give the credentials in one place")
        if self.record_format is RecordFormat.CLOUDEVENTS:
            # A CloudEvent in binary mode says `content-type: application/json`; a framed value is not that.
            raise ValueError(f"{env['value_format']}=json-schema and {env['record_format']}=cloudevents do not "
                             "go together: choose one")

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
        if self.cloudevents_source is not None and self.record_format is not RecordFormat.CLOUDEVENTS:
            raise ValueError(
                f"{env['cloudevents_source']} is set but {env['record_format']}={self.record_format.value}: only "
                f"CloudEvents records carry a source; set {env['record_format']}=cloudevents, or unset it"
            )
        self._registry_agrees()
        if self.topic_for_pattern().fullmatch(self.dlq_topic_name):
            raise ValueError(
                f"{env['dlq_topic']} renders {self.dlq_topic_name!r}, which is also an event topic of "
                f"{env['topic_template']}={self.topic_template!r}; choose a dead-letter topic outside it"
            )
        return self

    @model_validator(mode="after")
    def _transactions_fit(self) -> BridgeConfig:
        env = ENV_NAMES
        if not is_legal_topic_name(self.progress_topic_name):
            raise ValueError(
                f"{env['progress_topic']}={self.progress_topic!r} with {env['bridge_name']}={self.bridge_name!r} "
                f"renders {self.progress_topic_name!r}, which Kafka refuses: a topic name is 1 to 249 of [a-zA-Z0-9._-]"
            )
        if self.progress_topic_name == self.dlq_topic_name or self.topic_for_pattern().fullmatch(
                self.progress_topic_name):
            raise ValueError(
                f"{env['progress_topic']} renders {self.progress_topic_name!r}, which is also the dead-letter topic "
                f"or an event topic of {env['topic_template']}={self.topic_template!r}; choose a topic of its own"
            )
        if self.delivery is not DeliveryMode.EXACTLY_ONCE:
            return self
        if "transactional.id" in self.producer_extra:
            raise ValueError(
                f"{EXTRA_ENV_NAME} sets transactional.id, which {env['delivery']}=exactly-once derives from "
                f"{env['bridge_name']} (every instance of a name must share it to fence the others); remove it"
            )
        if self.transaction_max_events > self.max_in_flight:
            raise ValueError(
                f"{env['transaction_max_events']}={self.transaction_max_events} is above "
                f"{env['max_in_flight']}={self.max_in_flight}: a transaction's events stay in flight until it "
                f"commits, so it could never fill; lower {env['transaction_max_events']} or raise "
                f"{env['max_in_flight']}"
            )
        if self.transaction_interval_ms >= self.delivery_timeout_ms:
            raise ValueError(
                f"{env['transaction_interval_ms']}={self.transaction_interval_ms} must be below "
                f"{env['delivery_timeout_ms']}={self.delivery_timeout_ms}, which is also the transaction timeout: "
                "the broker would abort a transaction before the bridge commits it"
            )
        if self.delivery_timeout_ms > BROKER_TRANSACTION_MAX_TIMEOUT_MS:
            raise ValueError(
                f"{env['delivery_timeout_ms']}={self.delivery_timeout_ms} is also the transaction timeout with "
                f"{env['delivery']}=exactly-once, and brokers refuse one above transaction.max.timeout.ms "
                f"({BROKER_TRANSACTION_MAX_TIMEOUT_MS} by default); lower it"
            )
        return self

    @property
    def progress_topic_name(self) -> str:
        """The progress topic of exactly-once delivery, with the bridge name filled in."""
        return render_template(self.progress_topic, "bridge_name", self.bridge_name)

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

    @property
    def ce_source(self) -> str:
        """`ce_source` of the cloudevents format: the setting, else derived from the bridge name."""
        return self.cloudevents_source or f"urn:outbox-bridge:{self.bridge_name}"

    @property
    def trace_exporters(self) -> tuple[str, ...]:
        """The OpenTelemetry exporters of the bridge's publish spans; none (tracing off) unless
        OTEL_TRACES_EXPORTER names one."""
        if self.traces_exporter is None or self.traces_exporter == "none":
            return ()
        return tuple(self.traces_exporter.split(","))

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
        return topic_pattern(self.topic_template, "aggregate_type")


    # -------------------------------------------------------------------------------------- sections

    @cached_property
    def database(self) -> DatabaseSection:
        return DatabaseSection(url=self.db_url, bridge_name=self.bridge_name)

    @cached_property
    def kafka(self) -> KafkaConnection:
        """Bootstrap and security settings of every Kafka client (typed settings, and security extras)."""
        return KafkaConnection(
            bootstrap_servers=self.bootstrap_servers,
            security=MappingProxyType(connection_settings(self._typed_security(), self.producer_extra)),
        )

    @cached_property
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

    @cached_property
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
            record_format=self.record_format,
            cloudevents_source=self.ce_source,
        )

    @cached_property
    def schemas(self) -> SchemaSection | None:
        """The schema registry of the json-schema value format, or None for plain JSON values."""
        if self.value_format is not ValueFormat.JSON_SCHEMA or self.schema_registry_url is None:
            return None
        return SchemaSection(
            url=self.schema_registry_url,
            naming=self.schema_subjects,
            user=self.schema_registry_user,
            password=self.schema_registry_password,
            schema_dir=Path(self.schema_dir).expanduser() if self.schema_dir else None,
        )

    @cached_property
    def transactions(self) -> TransactionPolicy | None:
        """The exactly-once publisher's settings; None in at-least-once delivery."""
        if self.delivery is not DeliveryMode.EXACTLY_ONCE:
            return None
        return policy_for(self.bridge_name, self.transaction_max_events, self.transaction_interval_ms,
                          self.progress_topic_name, self.lease_timeout_s)

    @cached_property
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

    @cached_property
    def retention_section(self) -> RetentionSection | None:
        """Retention while leading, or None when every row is kept."""
        period = self.retention_period
        return None if period is None else RetentionSection(
            period=period, interval_s=self.retention_interval_s,
            hold_alert_after_s=parse_duration(self.retention_hold_alert_after).total_seconds())

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with `update`, its sections are derived anew from its own settings, not copied."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            for derived in set(copied.__dict__) - set(type(self).model_fields):
                del copied.__dict__[derived]
        return copied

    def masked(self) -> dict[str, Any]:
        """Every setting as plain values for the start-up log, with credentials masked."""
        return masked_settings({name: getattr(self, name) for name in type(self).model_fields})
