"""How projections run: typed, frozen settings from flags > environment > TOML file > defaults.

The TOML file (`--config` or PROJECTIONS_CONFIG_FILE) uses the field names at the top level
(`lake = "s3a://bucket/lake"`) and a `[kafka]` table of extra Kafka client settings for the source
(`"kafka.security.protocol" = "SASL_SSL"`); environment variables use the names in `ENV_NAMES`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from pydantic import SecretStr

from bridge.errors import ConfigurationError

CONFIG_FILE_ENV: Final = "PROJECTIONS_CONFIG_FILE"
ENV_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "bootstrap_servers": "KAFKA_BOOTSTRAP_SERVERS",
        "lake": "PROJECTIONS_LAKE_PATH",
        "topic_template": "BRIDGE_TOPIC_TEMPLATE",
        "starting_offsets": "PROJECTIONS_STARTING_OFFSETS",
        "max_offsets_per_trigger": "PROJECTIONS_MAX_OFFSETS_PER_TRIGGER",
        "trigger_interval_s": "PROJECTIONS_TRIGGER_INTERVAL_S",
        "fail_on_data_loss": "PROJECTIONS_FAIL_ON_DATA_LOSS",
        "metrics_port": "PROJECTIONS_METRICS_PORT",
        "metrics_host": "PROJECTIONS_METRICS_HOST",
        "modules": "PROJECTIONS_MODULES",
        "security_protocol": "KAFKA_SECURITY_PROTOCOL",
        "sasl_mechanism": "KAFKA_SASL_MECHANISM",
        "sasl_username": "KAFKA_SASL_USERNAME",
        "sasl_password": "KAFKA_SASL_PASSWORD",
        "ssl_ca_location": "KAFKA_SSL_CA_LOCATION",
    }
)
_SECRET_WORDS: Final = ("password", "secret", "jaas", "token", "key")


@dataclass(frozen=True)
class Settings:
    """Everything a projection run needs besides its declaration."""

    bootstrap_servers: str = "127.0.0.1:9092"
    lake: str = ".run/lake"
    topic_template: str = "outbox.event.{aggregate_type}"
    # Where a new checkpoint starts; an existing checkpoint always resumes where it stopped.
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    trigger_interval_s: float = 10.0
    available_now: bool = False
    fail_on_data_loss: bool = True
    metrics_port: int = 9465
    metrics_host: str = "127.0.0.1"
    modules: tuple[str, ...] = ()
    kafka: Mapping[str, str] = field(default_factory=dict)
    # How the source and replay's consumer connect (the bridge's names); see projections.kafka_clients.
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka", MappingProxyType(dict(self.kafka)))
        if isinstance(self.sasl_password, str):
            object.__setattr__(self, "sasl_password", SecretStr(self.sasl_password))
        if (self.sasl_username is None) != (self.sasl_password is None):
            raise ConfigurationError(
                "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD go together; give both, or neither"
            )
        if self.ssl_ca_location is not None and not Path(self.ssl_ca_location).expanduser().is_file():
            raise ConfigurationError(
                f"KAFKA_SSL_CA_LOCATION={self.ssl_ca_location}: no such file; give the PEM file of the CA that "
                "signed the brokers' certificates"
            )
        if not self.bootstrap_servers:
            raise ConfigurationError("KAFKA_BOOTSTRAP_SERVERS is empty; give host:port[,host:port...]")
        if self.starting_offsets not in ("earliest", "latest") and not self.starting_offsets.startswith("{"):
            raise ConfigurationError(
                f"PROJECTIONS_STARTING_OFFSETS={self.starting_offsets!r}: use earliest, latest, or "
                "Spark's JSON "
                'form {"topic":{"0":42}}'
            )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise ConfigurationError(
                f"PROJECTIONS_MAX_OFFSETS_PER_TRIGGER={self.max_offsets_per_trigger}: "
                "must be at least 1 (or unset)"
            )
        if self.trigger_interval_s <= 0:
            raise ConfigurationError(
                f"PROJECTIONS_TRIGGER_INTERVAL_S={self.trigger_interval_s}: must be positive"
            )
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigurationError(f"PROJECTIONS_METRICS_PORT={self.metrics_port}: use 0 (off) to 65535")
        bad = sorted(k for k in self.kafka if not k.startswith("kafka."))
        if bad:
            raise ConfigurationError(f"[kafka] settings must start with 'kafka.' (Spark's prefix): {bad}")

    def masked(self) -> dict[str, Any]:
        """The settings for logging, with secret-looking Kafka settings masked."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["kafka"] = {
            k: ("***" if any(w in k.lower() for w in _SECRET_WORDS) else v) for k, v in self.kafka.items()
        }
        values["modules"] = list(self.modules)
        if self.sasl_password is not None:
            values["sasl_password"] = "***"
        return values


def load_settings(
    flags: Mapping[str, Any] | None = None,
    toml_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build Settings from flags (None means unset) > environment > TOML file > defaults."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    path = toml_path if toml_path is not None else env.get(CONFIG_FILE_ENV)
    if path is not None and not str(path).strip():
        raise ConfigurationError(f"{CONFIG_FILE_ENV} is set but empty; name a TOML file or unset it to read none")
    if path:
        merged.update(_toml_values(Path(path)))
    for name, variable in ENV_NAMES.items():
        if variable not in env:
            continue
        if env[variable].strip() == "":
            # Set but empty is a mistake (`X=$UNSET_VAR`), not a request for the default.
            default = next(f.default for f in fields(Settings) if f.name == name)
            raise ConfigurationError(
                f"{variable}='' (from the environment) is refused: it is set but empty; give a value or unset "
                f"it to use the default ({default!r})"
            )
        merged[name] = _convert(name, env[variable], variable)
    for name, value in (flags or {}).items():
        if value is not None:
            merged[name] = _convert(name, value, f"--{name.replace('_', '-')}")
    return Settings(**merged)


def _toml_values(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigurationError(f"configuration file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"configuration file {path} is not valid TOML: {exc}") from None
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigurationError(
            f"configuration file {path}: unknown settings {unknown}; known: {sorted(known)}"
        )
    values = {k: _convert(k, v, f"{path}: {k}") for k, v in data.items() if k != "kafka"}
    if "kafka" in data:
        if not isinstance(data["kafka"], dict):
            raise ConfigurationError(f"configuration file {path}: [kafka] must be a table of kafka.* settings")
        values["kafka"] = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in data["kafka"].items()}
    return values


def _convert(name: str, value: Any, origin: str) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    try:
        if kind == "int" or kind == "int | None":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            lowered = str(value).strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(value)
            return lowered in ("1", "true", "yes", "on")
        if kind == "SecretStr | None":
            return SecretStr(str(value))
        if kind == "tuple[str, ...]":
            items = value if isinstance(value, list | tuple) else str(value).split(",")
            return tuple(str(i).strip() for i in items if str(i).strip())
    except ValueError:
        raise ConfigurationError(f"{origin}={value!r} is not a valid {kind}") from None
    return str(value)
