"""The security settings every Kafka client of the bridge shares: protocol, SASL, the CA.

They come from typed settings (`KAFKA_SECURITY_PROTOCOL`, `KAFKA_SASL_MECHANISM`, `KAFKA_SASL_USERNAME`,
`KAFKA_SASL_PASSWORD`, `KAFKA_SSL_CA_LOCATION`) or, as before, from producer extras (`[producer]`,
`BRIDGE_PRODUCER_EXTRA`) whose names are librdkafka's security properties (`security.protocol`, `sasl.*`,
`ssl.*`): those go to every client too, not only the producer, so the admin client of the topic checks
authenticates like the producer does. A key given both ways is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from bridge.enums import AnyCaseStrEnum


class SecurityProtocol(AnyCaseStrEnum):
    """librdkafka `security.protocol`."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(AnyCaseStrEnum):
    """librdkafka `sasl.mechanism` values that take a user name and password (OAUTHBEARER goes in extras)."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


#: librdkafka properties that decide how a client connects and authenticates, for every client.
_SECURITY_PREFIXES: Final = ("sasl.", "ssl.", "ssl_")
_SECURITY_KEYS: Final = frozenset({"security.protocol", "enable.ssl.certificate.verification",
                                   "ssl.endpoint.identification.algorithm", "client.dns.lookup"})


def is_security_key(key: str) -> bool:
    """Whether a librdkafka property is about connecting securely (and so belongs to every client)."""
    return key in _SECURITY_KEYS or key.startswith(_SECURITY_PREFIXES)


def connection_settings(typed: Mapping[str, Any], extras: Mapping[str, Any]) -> dict[str, Any]:
    """The security settings of every client: the typed ones, then security extras (never both, see below)."""
    settings = dict(typed)
    settings.update({key: value for key, value in extras.items() if is_security_key(key)})
    return settings


def security_conflicts(typed: Mapping[str, Any], extras: Mapping[str, Any]) -> list[str]:
    """Keys set by both a typed setting and an extra."""
    return sorted(set(typed) & set(extras))
