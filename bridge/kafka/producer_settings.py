"""The librdkafka producer settings: replication-safe by construction, extras checked for weakening.

The bridge never loses an acknowledged event only if the producer is idempotent, waits for all
in-sync replicas, keeps at most 5 requests in flight and retries until the delivery timeout. Extra
settings (`BRIDGE_PRODUCER_EXTRA`, TOML `[producer]`) may tune anything else; one that weakens
these is refused unless `BRIDGE_ALLOW_UNSAFE_PRODUCER` is true, and then it is warned about.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Protocol

from pydantic import SecretStr

from bridge.errors import ConfigurationError

log = logging.getLogger(__name__)

EXTRA_ENV: Final = "BRIDGE_PRODUCER_EXTRA"
ALLOW_UNSAFE_ENV: Final = "BRIDGE_ALLOW_UNSAFE_PRODUCER"
MAX_INT32: Final = 2_147_483_647
MASK: Final = "**********"
JAVA_COMPATIBLE_PARTITIONERS: Final = frozenset({"murmur2_random", "murmur2"})

# librdkafka's own defaults, kept as floors so a small window never shrinks the producer queue.
_QUEUE_MAX_MESSAGES_DEFAULT = 100_000
_QUEUE_MAX_KBYTES_DEFAULT = 1_048_576

# Extras may not set what a typed setting owns: one place per setting, so the logged config is the truth.
_OWNED_BY_SETTING: Final[Mapping[str, str]] = {
    "bootstrap.servers": "KAFKA_BOOTSTRAP_SERVERS",
    "metadata.broker.list": "KAFKA_BOOTSTRAP_SERVERS",
    "linger.ms": "BRIDGE_LINGER_MS",
    "queue.buffering.max.ms": "BRIDGE_LINGER_MS",
    "batch.size": "BRIDGE_BATCH_SIZE",
    "compression.type": "BRIDGE_COMPRESSION",
    "compression.codec": "BRIDGE_COMPRESSION",
    "delivery.timeout.ms": "BRIDGE_DELIVERY_TIMEOUT_MS",
    "message.timeout.ms": "BRIDGE_DELIVERY_TIMEOUT_MS",
}


# librdkafka properties whose values are credentials, or may embed them.
_SECRET_KEY = re.compile(r"password|secret|key\.pem|oauthbearer\.config|jaas", re.IGNORECASE)


def is_secret_producer_key(key: str) -> bool:
    """Whether the librdkafka property key holds a credential that must never be logged."""
    return _SECRET_KEY.search(key) is not None


def _is_false(value: object) -> bool:
    return value is False or str(value).strip().lower() in {"false", "0", "no", "off", "f", "n"}


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None  # not a number: librdkafka itself will refuse it when the producer is built


def _weakens_acks(value: object) -> bool:
    return str(value).strip().lower() not in {"all", "-1"}


def _weakens_in_flight(value: object) -> bool:
    number = _as_int(value)
    return number is not None and number > 5


def _weakens_retries(value: object) -> bool:
    return _as_int(value) == 0


def _weakens_partitioner(value: object) -> bool:
    return str(value).strip() not in JAVA_COMPATIBLE_PARTITIONERS


@dataclass(frozen=True)
class _Guard:
    weakens: Callable[[object], bool]
    safe: str
    risk: str


_GUARDS: Final[Mapping[str, _Guard]] = {
    "acks": _Guard(_weakens_acks, "all", "a broker failure can lose events Kafka acknowledged"),
    "request.required.acks": _Guard(_weakens_acks, "all", "a broker failure can lose acknowledged events"),
    "enable.idempotence": _Guard(_is_false, "true", "retries can duplicate and reorder events within a key"),
    "enable.gapless.guarantee": _Guard(
        _is_false, "true", "after a refused batch, later events of a key can reach Kafka before the refused ones"
    ),
    "max.in.flight.requests.per.connection": _Guard(
        _weakens_in_flight, "5", "retries can reorder events within a key"
    ),
    "max.in.flight": _Guard(_weakens_in_flight, "5", "retries can reorder events within a key"),
    "retries": _Guard(_weakens_retries, str(MAX_INT32), "any transient broker error fails the delivery"),
    "message.send.max.retries": _Guard(
        _weakens_retries, str(MAX_INT32), "any transient broker error fails the delivery"
    ),
    "partitioner": _Guard(
        _weakens_partitioner, "murmur2_random", "keys land on other partitions than with a Java producer"
    ),
}


def check_extras(extra: Mapping[str, object], *, allow_unsafe: bool) -> tuple[str, ...]:
    """Refuse extras that override typed settings or weaken delivery; return warnings for allowed unsafe ones.

    Raises ConfigurationError naming every offending key, its value and the fix.
    """
    problems: list[str] = []
    warnings: list[str] = []
    for key, value in extra.items():
        if key in _OWNED_BY_SETTING:
            owner = _OWNED_BY_SETTING[key]
            problems.append(f"{EXTRA_ENV} sets {key!r}, which comes from {owner}; set {owner} instead")
            continue
        guard = _GUARDS.get(key)
        if guard is None or not guard.weakens(value):
            continue
        shown = MASK if isinstance(value, SecretStr) else value
        message = f"{EXTRA_ENV} sets {key}={shown!r}: {guard.risk}"
        if allow_unsafe:
            warnings.append(f"{message} (allowed by {ALLOW_UNSAFE_ENV}=true)")
        else:
            problems.append(
                f"{message}. Remove it (the bridge uses {key}={guard.safe}) or set {ALLOW_UNSAFE_ENV}=true "
                "to accept the risk"
            )
    if problems:
        raise ConfigurationError("unsafe producer settings:\n  " + "\n  ".join(problems))
    return tuple(warnings)


@dataclass(frozen=True)
class ProducerSettings:
    """The dict for `confluent_kafka.Producer`, and the warnings about unsafe extras that were allowed."""

    conf: dict[str, Any] = field(repr=False)  # holds credentials in clear: never log it, log masked()
    warnings: tuple[str, ...] = ()

    def masked(self) -> dict[str, Any]:
        """The settings for logging, with credentials hidden."""
        return {key: MASK if is_secret_producer_key(key) else value for key, value in self.conf.items()}


class ProducerConfig(Protocol):
    """The settings the producer is made from: the producer section of the bridge's configuration. The
    configuration also imports this module for its checks of extras, so this module names only what it reads."""

    @property
    def bridge_name(self) -> str: ...
    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def client_security(self) -> Mapping[str, Any]: ...
    @property
    def linger_ms(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def compression(self) -> Enum: ...
    @property
    def delivery_timeout_ms(self) -> int: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def max_in_flight_bytes(self) -> int: ...
    @property
    def producer_extra(self) -> Mapping[str, Any]: ...
    @property
    def allow_unsafe_producer(self) -> bool: ...


def default_client_id(config: ProducerConfig) -> str:
    """The producer's client.id unless an extra sets one: names the bridge in broker logs and quotas."""
    return f"outbox-bridge-{config.bridge_name}"


def safe_base(config: ProducerConfig, client_id: str | None = None) -> dict[str, Any]:
    """The settings the bridge always sets, from the typed configuration, before extras."""
    security = {
        key: value.get_secret_value() if isinstance(value, SecretStr) else value
        for key, value in config.client_security.items()
    }
    return {
        "bootstrap.servers": config.bootstrap_servers,
        **security,
        "client.id": client_id or default_client_id(config),
        "enable.idempotence": True,
        # On: when the broker refuses a batch for good (MSG_SIZE_TOO_LARGE, RECORD_LIST_TOO_LARGE, ...),
        # librdkafka without it bumps the epoch and goes on sending the partition's later batches, which then
        # land before the daemon re-sends the refused records: a consumer meets a key's seq 20 before its
        # seq 10. With it the producer raises a fatal error and sends nothing more (queued messages are
        # purged, in-flight ones still reported), which is what the daemon wants anyway: it discards the
        # producer and rewinds to the watermark on any failed delivery. librdkafka calls it experimental
        # and warns (CONFWARN) at every producer build: `explain_gapless` says why it is on instead, once.
        # If a release removes it, building the producer fails at start, loudly
        # (tests/unit/test_kafka_producer_settings.py builds one). Messages that time
        # out (delivery.timeout.ms) are outside it: later ones may land before the re-sends then.
        "enable.gapless.guarantee": True,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
        "message.send.max.retries": MAX_INT32,  # bounded by delivery.timeout.ms, not by a count
        "partitioner": "murmur2_random",
        "linger.ms": config.linger_ms,
        "batch.size": config.batch_size,
        "compression.type": config.compression.value,
        "delivery.timeout.ms": config.delivery_timeout_ms,
        # Let the in-flight window, not librdkafka's queue, decide when the reader waits.
        "queue.buffering.max.messages": max(_QUEUE_MAX_MESSAGES_DEFAULT, config.max_in_flight),
        "queue.buffering.max.kbytes": max(
            _QUEUE_MAX_KBYTES_DEFAULT, math.ceil(config.max_in_flight_bytes / 1024)
        ),
    }


#: What librdkafka says (a CONFWARN) each time it builds a producer with enable.gapless.guarantee, which the
#: bridge sets on purpose (see `safe_base`).
GAPLESS_EXPERIMENTAL: Final = "Configuration property enable.gapless.guarantee is experimental"
#: Why it is on, said instead of that warning: an operator reads a warning at every start as something wrong.
GAPLESS_REASON: Final = (
    "enable.gapless.guarantee is on (librdkafka calls it experimental): a batch Kafka refuses for good stops the "
    "producer instead of letting that key's later events reach Kafka first; the bridge then builds a new producer "
    "and re-sends from the watermark, so per-key order holds"
)
_gapless_explained = threading.Event()
_gapless_lock = threading.Lock()  # clients log from librdkafka's threads and the loop's


def explain_gapless(facility: str, text: str) -> bool:
    """Whether a librdkafka log line is its warning that enable.gapless.guarantee is experimental; if so, log
    `GAPLESS_REASON` at info instead, the first time in this process only."""
    if facility != "CONFWARN" or GAPLESS_EXPERIMENTAL not in text:
        return False
    with _gapless_lock:
        first = not _gapless_explained.is_set()
        _gapless_explained.set()
    if first:
        log.info(GAPLESS_REASON, extra={"setting": "enable.gapless.guarantee"})
    return True


def producer_settings(config: ProducerConfig, *, client_id: str | None = None) -> ProducerSettings:
    """Build the producer settings from config, or raise ConfigurationError for unsafe extras.

    Allowed unsafe extras are logged as warnings here and returned in `warnings`.
    """
    warnings = check_extras(config.producer_extra, allow_unsafe=config.allow_unsafe_producer)
    for warning in warnings:
        log.warning("unsafe producer setting: %s", warning)
    conf = safe_base(config, client_id)
    for key, value in config.producer_extra.items():
        conf[key] = value.get_secret_value() if isinstance(value, SecretStr) else value
    return ProducerSettings(conf=conf, warnings=warnings)
