"""The names settings are given by: each field's environment variable, the variable naming the TOML file,
and the TOML table of extra producer settings. The TOML file itself uses the field names."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

CONFIG_FILE_ENV: Final = "OUTBOX_CONFIG_FILE"

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
        "delivery": "BRIDGE_DELIVERY",
        "transaction_max_events": "BRIDGE_TRANSACTION_MAX_EVENTS",
        "transaction_interval_ms": "BRIDGE_TRANSACTION_INTERVAL_MS",
        "progress_topic": "BRIDGE_PROGRESS_TOPIC",
        "poison_policy": "BRIDGE_POISON_POLICY",
        "dlq_topic": "BRIDGE_DLQ_TOPIC",
        "record_format": "BRIDGE_RECORD_FORMAT",
        "cloudevents_source": "BRIDGE_CLOUDEVENTS_SOURCE",
        "value_format": "BRIDGE_VALUE_FORMAT",
        "schema_registry_url": "BRIDGE_SCHEMA_REGISTRY_URL",
        "schema_registry_user": "BRIDGE_SCHEMA_REGISTRY_USER",
        "schema_registry_password": "BRIDGE_SCHEMA_REGISTRY_PASSWORD",
        "schema_subjects": "BRIDGE_SCHEMA_SUBJECTS",
        "schema_dir": "BRIDGE_SCHEMA_DIR",
        # The standard OpenTelemetry variable, read by the bridge as its own setting; the SDK reads the other OTEL_*.
        "traces_exporter": "OTEL_TRACES_EXPORTER",
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
