"""The Kafka client settings of a projection: for Spark's Kafka source (`kafka.*` options, Java client names)
and for the librdkafka consumers of `replay` (time and seq lookups) and `status --lag`.

Both come from the same settings, so a secured cluster needs them once: the typed ones (`KAFKA_SECURITY_PROTOCOL`,
`KAFKA_SASL_MECHANISM`, `KAFKA_SASL_USERNAME`, `KAFKA_SASL_PASSWORD`, `KAFKA_SSL_CA_LOCATION`, as the bridge
names them) become both forms; `[kafka]` entries go to Spark as given and are translated for librdkafka
where it has the same setting (a JKS truststore it cannot read is refused, naming the fix).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

from bridge.errors import ConfigurationError
from bridge.kafka.acls import projection_group_prefix as group_prefix

__all__ = ["client_conf", "consumer_conf", "group_prefix", "source_options"]

if TYPE_CHECKING:
    from projections.settings import Settings

_LOGIN_MODULES: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: `[kafka]` options whose librdkafka setting has the same name after the `kafka.` prefix.
_SAME_NAME: Final = ("isolation.level", "security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm",
                     "ssl.ca.location")
_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def source_options(settings: Settings) -> dict[str, str]:
    """The `kafka.*` options of Spark's Kafka source: the isolation level and the typed security settings, then
    `[kafka]` entries (which win).

    Holds the password in clear (inside `kafka.sasl.jaas.config`): never log it.
    """
    options: dict[str, str] = {"kafka.isolation.level": settings.isolation_level}
    if settings.security_protocol:
        options["kafka.security.protocol"] = settings.security_protocol
    if settings.sasl_mechanism:
        options["kafka.sasl.mechanism"] = settings.sasl_mechanism
    if settings.sasl_username is not None and settings.sasl_password is not None:
        mechanism = (settings.sasl_mechanism or "PLAIN").upper()
        module = _LOGIN_MODULES.get(mechanism)
        if module is None:
            raise ConfigurationError(
                f"KAFKA_SASL_MECHANISM={settings.sasl_mechanism!r} takes no user name and password; use one of "
                f"{', '.join(_LOGIN_MODULES)}, or give kafka.sasl.jaas.config in [kafka]"
            )
        password = settings.sasl_password.get_secret_value()
        options["kafka.sasl.jaas.config"] = (
            f"{module} required username={_quote(settings.sasl_username)} password={_quote(password)};"
        )
    if settings.ssl_ca_location:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = settings.ssl_ca_location
    options.update(settings.kafka)
    return options


def client_conf(settings: Settings) -> dict[str, Any]:
    """librdkafka settings for an admin client of the projection's cluster: `consumer_conf` without a group."""
    conf = consumer_conf(settings, "unused")
    conf.pop("group.id")
    conf.pop("isolation.level")  # a consumer's setting: librdkafka would warn that an admin client ignores it
    return conf


def consumer_conf(settings: Settings, group_id: str) -> dict[str, Any]:
    """librdkafka settings for a consumer of replay or status: the same cluster, user and CA as the source.

    Holds the password in clear: never log it.
    """
    conf: dict[str, Any] = {"bootstrap.servers": settings.bootstrap_servers, "group.id": group_id}
    source = source_options(settings)
    for name in _SAME_NAME:
        if f"kafka.{name}" in source:
            conf[name] = source[f"kafka.{name}"]
    if conf.get("ssl.endpoint.identification.algorithm") == "":
        conf["ssl.endpoint.identification.algorithm"] = "none"
    jaas = source.get("kafka.sasl.jaas.config")
    if jaas is not None:
        fields = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_FIELD.findall(jaas)}
        if not any(jaas.startswith(module) for module in _LOGIN_MODULES.values()) or len(fields) != 2:
            raise ConfigurationError(
                "kafka.sasl.jaas.config uses a login module replay's consumer cannot take over; give the user "
                "as KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD instead"
            )
        conf["sasl.username"], conf["sasl.password"] = fields["username"], fields["password"]
    location = source.get("kafka.ssl.truststore.location")
    if location is not None:
        kind = source.get("kafka.ssl.truststore.type", "JKS").upper()
        if kind != "PEM":
            raise ConfigurationError(
                f"kafka.ssl.truststore.location={location} is a {kind} truststore, which replay's and status's "
                "consumer (librdkafka) cannot read; give the CA as a PEM file in KAFKA_SSL_CA_LOCATION "
                "(Spark then reads it as kafka.ssl.truststore.type=PEM)"
            )
        conf["ssl.ca.location"] = location
    if "kafka.ssl.truststore.certificates" in source:
        conf["ssl.ca.pem"] = source["kafka.ssl.truststore.certificates"]
    keystore = sorted(k for k in source if k.startswith("kafka.ssl.keystore."))
    if keystore:
        raise ConfigurationError(
            f"{', '.join(keystore)}: client certificates (mutual TLS) are not passed to replay's consumer; "
            "authenticate projections with SASL (KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD)"
        )
    return conf
