"""How projections run: typed, frozen settings from flags > environment > TOML file > defaults.

A pydantic-settings model, layered as the bridge's configuration is (`bridge.config`): `load_settings` reads
the TOML file (`--config` or PROJECTIONS_CONFIG_FILE), the environment variables named in `ENV_NAMES` and
the flags, and validates them once; every refusal is a ConfigurationError naming the variable (or the flag,
or the file and key), the value and what to give instead. The TOML file uses the field names at the top
level (`lake = "s3a://bucket/lake"`) and a `[kafka]` table of extra Kafka client settings for the source
(`"kafka.security.protocol" = "SASL_SSL"`). Constructing `Settings` directly uses only its arguments.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType, NoneType, UnionType
from typing import Any, Final, get_args, get_origin

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator

from bridge.errors import ConfigurationError
from bridge.layered_settings import LayeredSettings, TomlFile

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
        "isolation_level": "PROJECTIONS_KAFKA_ISOLATION_LEVEL",
        "modules": "PROJECTIONS_MODULES",
        "security_protocol": "KAFKA_SECURITY_PROTOCOL",
        "sasl_mechanism": "KAFKA_SASL_MECHANISM",
        "sasl_username": "KAFKA_SASL_USERNAME",
        "sasl_password": "KAFKA_SASL_PASSWORD",
        "ssl_ca_location": "KAFKA_SSL_CA_LOCATION",
    }
)
TOML_KAFKA_TABLE: Final = "kafka"
_SECRET_WORDS: Final = ("password", "secret", "jaas", "token", "key")
_YES: Final = frozenset({"1", "true", "yes", "on"})
_NO: Final = frozenset({"0", "false", "no", "off"})
#: Settings given only as flags, for one command: not read from the environment or the TOML file.
FLAG_ONLY: Final = frozenset({"accept_truncated_history"})


class Settings(LayeredSettings):
    """Everything a projection run needs besides its declaration."""

    bootstrap_servers: str = "127.0.0.1:9092"
    lake: str = ".run/lake"
    topic_template: str = "outbox.event.{aggregate_type}"
    # Where a new checkpoint starts; an existing checkpoint always resumes where it stopped.
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    trigger_interval_s: float = 10.0
    # Strict, so a switch takes only the words of `_switch_words` (1/0, true/false, yes/no, on/off), not
    # the longer list pydantic would.
    available_now: bool = Field(default=False, strict=True)
    fail_on_data_loss: bool = Field(default=True, strict=True)
    # A build from earliest whose first records Kafka has deleted is refused unless this is set
    # (`projections.history`). A flag only: it accepts one command's cut history, never every later one's.
    accept_truncated_history: bool = Field(default=False, strict=True)
    metrics_port: int = 9465
    metrics_host: str = "127.0.0.1"
    modules: tuple[str, ...] = ()
    kafka: Mapping[str, str] = Field(default_factory=lambda: MappingProxyType({}))
    # What the source and replay's consumer read: read_committed skips the records of aborted transactions (a
    # fenced bridge's in exactly-once delivery); on topics without transactions both read the same.
    isolation_level: str = "read_committed"
    # How the source and replay's consumer connect (the bridge's names); see projections.kafka_clients.
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None

    @field_validator("available_now", "fail_on_data_loss", mode="before")
    @classmethod
    def _switch_words(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        return word in _YES if word in _YES | _NO else value

    @field_validator("modules", mode="before")
    @classmethod
    def _modules_are_listed(cls, value: Any) -> Any:
        items = str(value).split(",") if isinstance(value, str) else value
        if isinstance(items, list | tuple):
            return tuple(str(item).strip() for item in items if str(item).strip())
        return items

    @field_validator("kafka")
    @classmethod
    def _kafka_options_are_sparks(cls, value: Mapping[str, str]) -> Mapping[str, str]:
        bad = sorted(k for k in value if not k.startswith("kafka."))
        if bad:
            raise ValueError(f"[kafka] settings must start with 'kafka.' (Spark's prefix): {bad}")
        return MappingProxyType(dict(value))

    @field_validator("isolation_level")
    @classmethod
    def _isolation_is_kafkas(cls, value: str) -> str:
        if value not in ("read_committed", "read_uncommitted"):
            raise ValueError(
                f"PROJECTIONS_KAFKA_ISOLATION_LEVEL={value!r}: use read_committed (the default: records of aborted "
                "transactions are skipped) or read_uncommitted"
            )
        return value

    @field_validator("ssl_ca_location")
    @classmethod
    def _ca_file_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_file():
            raise ValueError(
                f"KAFKA_SSL_CA_LOCATION={value}: no such file; give the PEM file of the CA that "
                "signed the brokers' certificates"
            )
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers_are_given(cls, value: str) -> str:
        if not value:
            raise ValueError("KAFKA_BOOTSTRAP_SERVERS is empty; give host:port[,host:port...]")
        return value

    @field_validator("starting_offsets")
    @classmethod
    def _starting_offsets_are_sparks(cls, value: str) -> str:
        if value not in ("earliest", "latest") and not value.startswith("{"):
            raise ValueError(
                f"PROJECTIONS_STARTING_OFFSETS={value!r}: use earliest, latest, or Spark's JSON "
                'form {"topic":{"0":42}}'
            )
        return value

    @field_validator("max_offsets_per_trigger")
    @classmethod
    def _at_least_one_offset(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"PROJECTIONS_MAX_OFFSETS_PER_TRIGGER={value}: must be at least 1 (or unset)")
        return value

    @field_validator("trigger_interval_s")
    @classmethod
    def _interval_is_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"PROJECTIONS_TRIGGER_INTERVAL_S={value}: must be positive")
        return value

    @field_validator("metrics_port")
    @classmethod
    def _port_is_a_port(cls, value: int) -> int:
        if not 0 <= value <= 65535:
            raise ValueError(f"PROJECTIONS_METRICS_PORT={value}: use 0 (off) to 65535")
        return value

    @model_validator(mode="after")
    def _sasl_user_and_password_agree(self) -> Settings:
        if (self.sasl_username is None) != (self.sasl_password is None):
            raise ValueError("KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD go together; give both, or neither")
        return self

    def masked(self) -> dict[str, Any]:
        """The settings for logging, with secret-looking Kafka settings masked."""
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values["kafka"] = {
            k: ("***" if any(w in k.lower() for w in _SECRET_WORDS) else v) for k, v in self.kafka.items()
        }
        values["modules"] = list(self.modules)
        if self.sasl_password is not None:
            values["sasl_password"] = "***"
        return values


class _TomlFileSource(TomlFile):
    """The TOML file: field names at the top level, `[kafka]` for extra Kafka source options."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        data = super()._read_file(file_path)
        known = set(Settings.model_fields) - FLAG_ONLY
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigurationError(
                f"configuration file {file_path}: unknown settings {unknown}; known: {sorted(known)}"
            )
        if TOML_KAFKA_TABLE in data:
            table = data[TOML_KAFKA_TABLE]
            if not isinstance(table, dict):
                raise ConfigurationError(
                    f"configuration file {file_path}: [kafka] must be a table of kafka.* settings"
                )
            data[TOML_KAFKA_TABLE] = {
                str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in table.items()
            }
        return data


def load_settings(
    flags: Mapping[str, Any] | None = None,
    toml_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build Settings from flags (None means unset) > environment > TOML file > defaults."""
    env = os.environ if env is None else env
    path = toml_path if toml_path is not None else env.get(CONFIG_FILE_ENV)
    if path is not None and not str(path).strip():
        raise ConfigurationError(f"{CONFIG_FILE_ENV} is set but empty; name a TOML file or unset it to read none")
    if path and not Path(path).is_file():
        raise ConfigurationError(f"configuration file {path} does not exist")
    # Each layer with how a refusal names where a value came from, as the operator wrote it.
    layers: list[tuple[Mapping[str, Any], Callable[[str], str]]] = [
        (_TomlFileSource(Settings, toml_file=Path(path) if path else None)(), lambda name: f"{path}: {name}"),
        (_env_values(env), ENV_NAMES.__getitem__),
        ({k: v for k, v in (flags or {}).items() if v is not None}, lambda name: f"--{name.replace('_', '-')}"),
    ]
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for values, origin in layers:  # lowest precedence first
        for name, value in values.items():
            merged[name] = value
            origins[name] = origin(name)
    try:
        return Settings(**merged)
    except ValidationError as exc:
        raise ConfigurationError(_describe_errors(exc, origins)) from None


def _env_values(env: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, variable in ENV_NAMES.items():
        if variable not in env:
            continue
        if env[variable].strip() == "":
            # Set but empty is a mistake (`X=$UNSET_VAR`), not a request for the default.
            default = Settings.model_fields[name].get_default(call_default_factory=True)
            raise ConfigurationError(
                f"{variable}='' (from the environment) is refused: it is set but empty; give a value or unset "
                f"it to use the default ({default!r})"
            )
        values[name] = env[variable]
    return values


def _describe_errors(exc: ValidationError, origins: Mapping[str, str]) -> str:
    """One line per refused value: the check's own message, or which setting is not of its type."""
    lines = []
    for error in exc.errors(include_url=False):
        if error["type"] == "value_error" or not error["loc"]:
            lines.append(error["msg"].removeprefix("Value error, "))
            continue
        name = str(error["loc"][0])
        if name not in Settings.model_fields:
            lines.append(f"unknown setting {name!r}; known: {', '.join(Settings.model_fields)}")
            continue
        origin = origins.get(name, name)
        lines.append(f"{origin}={error.get('input')!r} is not a valid {_type_name(name)}")
    return "\n".join(lines)


def _type_name(name: str) -> str:
    """The setting's type as written in the model: int, float, bool, int | None..."""
    annotation = Settings.model_fields[name].annotation
    if get_origin(annotation) is UnionType:
        members = get_args(annotation)
        return " | ".join("None" if arg is NoneType else str(getattr(arg, "__name__", arg)) for arg in members)
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)
