"""Spark's Kafka source and replay's own consumer connect the same way: the full security set for both."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.errors import ConfigurationError
from projections.kafka_clients import consumer_conf, group_prefix, source_options
from projections.settings import Settings, load_settings

SECRET = 'pw-with-"quote-and-\\backslash'


def _secured(tmp_path: Path) -> Settings:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    return load_settings(env={
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:39092",
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "KAFKA_SASL_USERNAME": "proj-orders",
        "KAFKA_SASL_PASSWORD": SECRET,
        "KAFKA_SSL_CA_LOCATION": str(ca),
    })


def test_the_spark_source_gets_protocol_mechanism_jaas_and_a_pem_truststore(tmp_path: Path) -> None:
    options = source_options(_secured(tmp_path))
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"].startswith(
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="proj-orders" password="'
    )
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == str(tmp_path / "ca.pem")


def test_replays_consumer_gets_the_same_user_password_and_ca(tmp_path: Path) -> None:
    conf = consumer_conf(_secured(tmp_path), "g")
    assert conf == {
        "bootstrap.servers": "127.0.0.1:39092", "group.id": "g", "isolation.level": "read_committed",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "proj-orders", "sasl.password": SECRET,
        "ssl.ca.location": str(tmp_path / "ca.pem"),
    }


def test_a_kafka_table_written_for_spark_is_translated_for_replay(tmp_path: Path) -> None:
    settings = Settings(kafka={
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  'username="u" password="p";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/etc/ca.pem",
    })
    conf = consumer_conf(settings, "g")
    assert (conf["sasl.username"], conf["sasl.password"], conf["ssl.ca.location"]) == ("u", "p", "/etc/ca.pem")


def test_a_jks_truststore_is_refused_for_replay_naming_the_fix() -> None:
    settings = Settings(kafka={"kafka.ssl.truststore.location": "/etc/trust.jks"})
    with pytest.raises(ConfigurationError, match="KAFKA_SSL_CA_LOCATION"):
        consumer_conf(settings, "g")


def test_the_password_is_masked_in_the_logged_settings(tmp_path: Path) -> None:
    settings = _secured(tmp_path)
    assert SECRET not in repr(settings.masked()) and SECRET not in repr(settings)


def test_group_prefixes_of_two_projections_never_overlap() -> None:
    assert not (group_prefix("order_history") + "x").startswith(group_prefix("order"))


def test_the_source_and_replays_consumer_read_committed_records_unless_told_otherwise() -> None:
    default = load_settings(env={})
    assert source_options(default)["kafka.isolation.level"] == "read_committed"
    assert consumer_conf(default, "g")["isolation.level"] == "read_committed"
    chosen = load_settings(env={"PROJECTIONS_KAFKA_ISOLATION_LEVEL": "read_uncommitted"})
    assert source_options(chosen)["kafka.isolation.level"] == "read_uncommitted"
    assert consumer_conf(chosen, "g")["isolation.level"] == "read_uncommitted"


def test_an_isolation_level_kafka_does_not_know_is_refused_naming_both() -> None:
    with pytest.raises(ConfigurationError, match=r"PROJECTIONS_KAFKA_ISOLATION_LEVEL='committed'.*read_committed"):
        load_settings(env={"PROJECTIONS_KAFKA_ISOLATION_LEVEL": "committed"})
