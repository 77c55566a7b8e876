"""Producer settings: replication-safe by construction; extras that weaken delivery are refused or warned."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from pydantic import SecretStr

from bridge.config import BridgeConfig, Compression, ProducerSection
from bridge.errors import ConfigurationError
from bridge.kafka import producer_settings as settings_module
from bridge.kafka.producer_settings import MAX_INT32, check_extras, is_secret_producer_key, producer_settings
from bridge.kafka.reachability import ClientLog, quiet_client_settings, reachability

pytestmark = pytest.mark.unit


def config_with(**overrides: Any) -> ProducerSection:
    return BridgeConfig(**overrides).producer


def test_safe_settings_are_always_set() -> None:
    conf = producer_settings(config_with(bootstrap_servers="k1:9092,k2:9092", bridge_name="orders")).conf
    assert conf["bootstrap.servers"] == "k1:9092,k2:9092"
    assert conf["client.id"] == "outbox-bridge-orders"
    assert conf["enable.idempotence"] is True
    assert conf["acks"] == "all"
    assert conf["max.in.flight.requests.per.connection"] == 5
    assert conf["message.send.max.retries"] == MAX_INT32
    assert conf["partitioner"] == "murmur2_random"


def test_the_producer_stops_at_the_first_batch_the_broker_refuses() -> None:
    # enable.gapless.guarantee: without it librdkafka goes on sending a partition's later batches after
    # one is refused for good, and they reach Kafka before the daemon re-sends the refused records.
    assert producer_settings(config_with()).conf["enable.gapless.guarantee"] is True
    with pytest.raises(ConfigurationError, match=r"enable\.gapless\.guarantee=False"):
        check_extras({"enable.gapless.guarantee": False}, allow_unsafe=False)
    assert check_extras({"enable.gapless.guarantee": "true"}, allow_unsafe=False) == ()


def test_typed_tuning_settings_become_librdkafka_keys() -> None:
    config = config_with(
        linger_ms=20, batch_size=65536, compression=Compression.ZSTD, delivery_timeout_ms=60_000
    )
    conf = producer_settings(config).conf
    assert (conf["linger.ms"], conf["batch.size"]) == (20, 65536)
    assert conf["compression.type"] == "zstd"
    assert conf["delivery.timeout.ms"] == 60_000


def test_client_id_can_be_given() -> None:
    assert producer_settings(config_with(), client_id="bridge-7").conf["client.id"] == "bridge-7"


def test_producer_queue_is_never_smaller_than_the_in_flight_window() -> None:
    small = producer_settings(config_with(max_in_flight=10, max_in_flight_bytes=4096)).conf
    assert small["queue.buffering.max.messages"] == 100_000  # librdkafka's default kept as a floor
    assert small["queue.buffering.max.kbytes"] == 1_048_576
    big = producer_settings(config_with(max_in_flight=1_000_000, max_in_flight_bytes=4 * 1024**3 + 1)).conf
    assert big["queue.buffering.max.messages"] == 1_000_000
    assert big["queue.buffering.max.kbytes"] == 4 * 1024**2 + 1  # rounded up


def test_unknown_extras_pass_through_and_secrets_are_unwrapped() -> None:
    config = config_with(
        producer_extra={
            "security.protocol": "SASL_SSL",
            "sasl.password": "pa55",
            "socket.keepalive.enable": True,
        }
    )
    settings = producer_settings(config)
    assert settings.conf["security.protocol"] == "SASL_SSL"
    assert settings.conf["sasl.password"] == "pa55"
    assert settings.conf["socket.keepalive.enable"] is True
    assert settings.warnings == ()


def test_masked_and_repr_hide_credentials() -> None:
    settings = producer_settings(
        config_with(producer_extra={"sasl.password": "pa55", "sasl.username": "svc"})
    )
    assert settings.masked()["sasl.password"] == "**********"
    assert settings.masked()["sasl.username"] == "svc"
    assert "pa55" not in repr(settings)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("acks", "1"),
        ("acks", 0),
        ("request.required.acks", 1),
        ("enable.idempotence", False),
        ("enable.idempotence", "false"),
        ("max.in.flight.requests.per.connection", 6),
        ("max.in.flight", "100"),
        ("retries", 0),
        ("message.send.max.retries", "0"),
        ("partitioner", "consistent_random"),
        ("partitioner", "fnv1a_random"),
    ],
)
def test_extras_that_weaken_delivery_are_refused_with_key_value_and_fix(key: str, value: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_extras({key: value}, allow_unsafe=False)
    message = str(info.value)
    assert f"{key}={value!r}" in message
    assert "BRIDGE_PRODUCER_EXTRA" in message
    assert "BRIDGE_ALLOW_UNSAFE_PRODUCER=true" in message
    assert "Remove it" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("acks", "all"),
        ("acks", -1),
        ("acks", "ALL"),
        ("enable.idempotence", True),
        ("max.in.flight.requests.per.connection", 1),
        ("max.in.flight", 5),
        ("retries", 10),
        ("partitioner", "murmur2"),
        ("partitioner", "murmur2_random"),
        ("enable.gapless.guarantee", True),
        ("queue.buffering.max.messages", 500_000),
    ],
)
def test_safe_or_unrelated_extras_are_accepted(key: str, value: object) -> None:
    assert check_extras({key: value}, allow_unsafe=False) == ()


def test_unsafe_extras_are_warned_about_when_allowed(caplog: pytest.LogCaptureFixture) -> None:
    config = config_with(producer_extra={"acks": 1, "enable.idempotence": False}, allow_unsafe_producer=True)
    with caplog.at_level(logging.WARNING, logger="bridge.kafka.producer_settings"):
        settings = producer_settings(config)
    assert settings.conf["acks"] == 1
    assert settings.conf["enable.idempotence"] is False
    assert len(settings.warnings) == 2
    assert all("BRIDGE_ALLOW_UNSAFE_PRODUCER=true" in warning for warning in settings.warnings)
    assert "acks=1" in caplog.text


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigurationError) as info:
        check_extras({"acks": 1, "partitioner": "random", "linger.ms": 1}, allow_unsafe=False)
    message = str(info.value)
    assert "acks=1" in message
    assert "partitioner='random'" in message
    assert "BRIDGE_LINGER_MS" in message


@pytest.mark.parametrize(
    ("key", "setting"),
    [
        ("bootstrap.servers", "KAFKA_BOOTSTRAP_SERVERS"),
        ("metadata.broker.list", "KAFKA_BOOTSTRAP_SERVERS"),
        ("linger.ms", "BRIDGE_LINGER_MS"),
        ("queue.buffering.max.ms", "BRIDGE_LINGER_MS"),
        ("batch.size", "BRIDGE_BATCH_SIZE"),
        ("compression.type", "BRIDGE_COMPRESSION"),
        ("compression.codec", "BRIDGE_COMPRESSION"),
        ("delivery.timeout.ms", "BRIDGE_DELIVERY_TIMEOUT_MS"),
        ("message.timeout.ms", "BRIDGE_DELIVERY_TIMEOUT_MS"),
    ],
)
def test_extras_may_not_override_typed_settings_even_when_unsafe_is_allowed(key: str, setting: str) -> None:
    with pytest.raises(
        ConfigurationError, match=f"'{key}', which comes from {setting}; set {setting} instead"
    ):
        check_extras({key: "1"}, allow_unsafe=True)


def test_secret_values_are_never_echoed_in_refusals() -> None:
    with pytest.raises(ConfigurationError) as info:
        check_extras({"partitioner": SecretStr("hidden")}, allow_unsafe=False)
    assert "hidden" not in str(info.value)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("sasl.password", True),
        ("ssl.key.password", True),
        ("ssl.keystore.password", True),
        ("ssl.key.pem", True),
        ("sasl.oauthbearer.client.secret", True),
        ("sasl.oauthbearer.config", True),
        ("sasl.username", False),
        ("security.protocol", False),
    ],
)
def test_secret_keys_are_recognised(key: str, secret: bool) -> None:
    assert is_secret_producer_key(key) is secret


def test_librdkafka_accepts_the_settings_and_delivers_with_them() -> None:
    # The in-process mock cluster replaces bootstrap.servers; everything else is checked by librdkafka.
    conf = dict(producer_settings(config_with(max_in_flight=1_000_000)).conf)
    producer = Producer({**conf, "test.mock.num.brokers": 3, "log_level": 3})
    results: list[KafkaError | None] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        results.append(err)

    producer.produce("outbox.event.Order", key=b"order-1", value=b"{}", on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert results == [None]


def test_the_experimental_gapless_setting_is_explained_once_at_info_not_warned_about(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # librdkafka warns (CONFWARN) at every producer build that enable.gapless.guarantee is experimental; an
    # operator reads a warning at every start as something wrong. The bridge sets it on purpose: say why, once.
    monkeypatch.setattr(settings_module, "_gapless_explained", threading.Event(), raising=False)  # a new process
    conf = dict(producer_settings(config_with()).conf)
    with caplog.at_level(logging.INFO, logger="bridge"):
        for _ in range(2):  # a start, and a rebuild after a fatal error
            producer = Producer({**conf, **quiet_client_settings("mock"), "test.mock.num.brokers": 1})
            producer.poll(0.5)  # serves the client's log, where the warning waits from the build on
            producer.flush(5)
    gapless = [r for r in caplog.records if "enable.gapless.guarantee" in r.getMessage()]
    assert [r.getMessage() for r in gapless if r.levelno >= logging.WARNING] == []
    assert [(r.levelno, r.getMessage()) for r in gapless] == [(logging.INFO, settings_module.GAPLESS_REASON)]


def test_other_client_warnings_still_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    consumer_only = ("[thrd:app]: Configuration property auto.offset.reset is a consumer property and will be "
                     "ignored by this producer instance")
    with caplog.at_level(logging.INFO, logger="bridge"):
        ClientLog(reachability("mock")).log(logging.WARNING, "%s [%s] %s", "CONFWARN", "rdkafka#producer-1",
                                            consumer_only)
    assert [(r.levelno, r.name) for r in caplog.records] == [(logging.WARNING, "bridge.kafka.librdkafka")]
    assert "auto.offset.reset is a consumer property" in caplog.records[0].getMessage()
