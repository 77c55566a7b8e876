"""Every Kafka client of the bridge gets the same security settings, and the password never shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.config import load_config
from bridge.errors import ConfigurationError
from bridge.kafka.producer_settings import producer_settings

SECRET = "s3cr3t-pw-do-not-log"


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    return {
        "KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "KAFKA_SASL_MECHANISM": "scram-sha-512",
        "KAFKA_SASL_USERNAME": "outbox-bridge",
        "KAFKA_SASL_PASSWORD": SECRET,
        "KAFKA_SSL_CA_LOCATION": str(ca),
        **more,
    }


def test_typed_security_settings_reach_the_producer_and_every_other_client(tmp_path: Path) -> None:
    config = load_config(env=_env(tmp_path))
    wanted = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
              "sasl.username": "outbox-bridge", "sasl.password": SECRET,
              "ssl.ca.location": str(tmp_path / "ca.pem")}
    assert wanted.items() <= producer_settings(config.producer).conf.items()
    assert wanted.items() <= config.kafka.client_conf().items()
    assert config.kafka.principal == "User:outbox-bridge"


def test_security_extras_reach_the_admin_client_too() -> None:
    extra = json.dumps({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
                        "sasl.password": SECRET, "socket.keepalive.enable": True})
    conf = load_config(env={"BRIDGE_PRODUCER_EXTRA": extra}).kafka.client_conf()
    assert conf["sasl.password"] == SECRET and conf["sasl.mechanism"] == "PLAIN"
    assert "socket.keepalive.enable" not in conf  # a producer tuning, not a connection setting


def test_the_password_is_masked_in_the_logged_configuration(tmp_path: Path) -> None:
    config = load_config(env=_env(tmp_path))
    assert SECRET not in repr(config.masked())
    assert SECRET not in repr(config)
    assert SECRET not in repr(producer_settings(config.producer).masked())


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KAFKA_SASL_PASSWORD": None}, "KAFKA_SASL_USERNAME is set but KAFKA_SASL_PASSWORD is not"),
        ({"KAFKA_SECURITY_PROTOCOL": "SSL"}, "need KAFKA_SECURITY_PROTOCOL=SASL_SSL"),
        ({"KAFKA_SSL_CA_LOCATION": "/nonexistent/ca.pem"}, "KAFKA_SSL_CA_LOCATION='/nonexistent/ca.pem'"),
        ({"BRIDGE_PRODUCER_EXTRA": '{"sasl.username": "other"}'}, "sets sasl.username, which the"),
    ],
)
def test_inconsistent_security_settings_are_refused_naming_the_setting(
    tmp_path: Path, env: dict[str, str | None], message: str
) -> None:
    settings = {k: v for k, v in {**_env(tmp_path), **env}.items() if v is not None}
    with pytest.raises(ConfigurationError) as caught:
        load_config(env=settings)
    assert message in str(caught.value)
    assert SECRET not in str(caught.value)
