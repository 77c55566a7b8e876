"""`load_config`: flags over environment variables over a TOML file over defaults.

Every validation failure becomes one ConfigurationError naming the variable, the bad value (credentials
masked), where it came from and what is accepted. The TOML file uses the field names (`max_in_flight = 5000`)
and a `[producer]` table for extra librdkafka settings; environment variables use the names in `ENV_NAMES`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from enum import Enum
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from annotated_types import Ge, Gt, Le, Lt
from pydantic import ValidationError

from bridge.config.env_names import CONFIG_FILE_ENV, ENV_NAMES, TOML_PRODUCER_TABLE
from bridge.config.masking import mask_url, masked_input
from bridge.config.model import BridgeConfig
from bridge.errors import ConfigurationError
from bridge.kafka.producer_settings import check_extras
from bridge.layered_settings import TomlFile

# The package's name: operators filter the start-up warnings by it.
log = logging.getLogger("bridge.config")


def _env_values(env: Mapping[str, str]) -> dict[str, Any]:
    """The settings given as environment variables (names from ENV_NAMES); ConfigurationError for a
    variable that is set but empty, which is a mistake (`KAFKA_BOOTSTRAP_SERVERS=$UNSET_VAR`), not a
    request for the default."""
    values: dict[str, Any] = {}
    empty: list[str] = []
    for name, env_name in ENV_NAMES.items():
        raw = env.get(env_name)
        if raw is None:
            continue
        if raw.strip() == "":
            empty.append(name)
            continue
        values[name] = _decode_json_object(env_name, raw) if name == "producer_extra" else raw
    if empty:
        raise ConfigurationError("invalid configuration:\n  " + "\n  ".join(_empty_refusal(name) for name in empty))
    return values


def _empty_refusal(name: str) -> str:
    field = BridgeConfig.model_fields[name]
    default = field.get_default(call_default_factory=True)
    shown = "unset" if default is None else repr(default.value if isinstance(default, Enum) else default)
    if name == "db_url":
        shown = repr(mask_url(default.get_secret_value()))
    return (
        f"{ENV_NAMES[name]}='' (from the environment) is refused: it is set but empty; give a value "
        f"({_accepted(name)}) or unset it to use the default ({shown})"
    )


def _decode_json_object(env_name: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f'{env_name} is not valid JSON ({exc}); expected an object such as {{"sasl.mechanism": "PLAIN"}}'
        ) from None
    if not isinstance(value, dict):
        raise ConfigurationError(
            f'{env_name} must be a JSON object like {{"sasl.mechanism": "PLAIN"}}, not {type(value).__name__}'
        )
    return value


class _TomlFileSource(TomlFile):
    """The TOML file: field names at the top level, `[producer]` for extra librdkafka settings."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        data = super()._read_file(file_path)
        allowed = (set(ENV_NAMES) - {"producer_extra"}) | {TOML_PRODUCER_TABLE}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ConfigurationError(
                f"configuration file {file_path}: unknown key {', '.join(map(repr, unknown))}; "
                f"known keys: {', '.join(sorted(allowed))}"
            )
        if TOML_PRODUCER_TABLE in data:
            if not isinstance(data[TOML_PRODUCER_TABLE], dict):
                raise ConfigurationError(
                    f"configuration file {file_path}: '{TOML_PRODUCER_TABLE}' must be a table of librdkafka "
                    'settings, e.g. [producer] followed by "sasl.mechanism" = "PLAIN"'
                )
            data["producer_extra"] = data.pop(TOML_PRODUCER_TABLE)
        return data


def load_config(
    flags: Mapping[str, Any] | None = None,
    toml_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> BridgeConfig:
    """Build the configuration from flags > environment > TOML file > defaults, or raise ConfigurationError.

    flags are keyed by field name (None values are ignored, as for unset command-line options); env
    defaults to `os.environ`; the TOML path defaults to `$OUTBOX_CONFIG_FILE`.
    """
    env = os.environ if env is None else env
    flag_values = _flag_values(flags or {})
    path, path_origin = (
        (toml_path, "argument") if toml_path is not None else (env.get(CONFIG_FILE_ENV), CONFIG_FILE_ENV)
    )
    if path is not None and not str(path).strip():
        raise ConfigurationError(
            f"{CONFIG_FILE_ENV if path_origin == CONFIG_FILE_ENV else '--config'} is set but empty; name a TOML "
            "file or unset it to read none"
        )
    if path and not Path(path).expanduser().is_file():
        raise ConfigurationError(f"configuration file {path} (from {path_origin}) does not exist")
    _warn_unknown_env(env)

    toml_values = _TomlFileSource(BridgeConfig, toml_file=Path(path) if path else None)()
    layers = [
        (toml_values, f"TOML file {path}"),
        (_env_values(env), "the environment"),
        (flag_values, "a flag"),
    ]
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for values, origin in layers:  # lowest precedence first
        for name, value in values.items():
            if name == "producer_extra" and name in merged:
                # Extras merge key by key, so a file can hold the SASL setup and the environment one override.
                value = {**merged[name], **value}
            merged[name] = value
            origins[name] = origin
    try:
        config = BridgeConfig(**merged)
    except ValidationError as exc:
        raise ConfigurationError(_describe_errors(exc, origins)) from None
    # Unsafe producer extras are refused here too, so every command fails early, not only `run`.
    check_extras(config.producer_extra, allow_unsafe=config.allow_unsafe_producer)
    return config


def _flag_values(flags: Mapping[str, Any]) -> dict[str, Any]:
    values = {name.replace("-", "_"): value for name, value in flags.items() if value is not None}
    unknown = sorted(set(values) - set(ENV_NAMES))
    if unknown:
        raise ConfigurationError(
            f"unknown setting {', '.join(map(repr, unknown))}; known: {', '.join(ENV_NAMES)}"
        )
    return values


def _warn_unknown_env(env: Mapping[str, str]) -> None:
    # A misspelt variable would otherwise be silently ignored in favour of the default.
    known = set(ENV_NAMES.values()) | {CONFIG_FILE_ENV}
    for name in sorted(env):
        if name.startswith("BRIDGE_") and name not in known:
            log.warning("ignoring unknown environment variable %s; known: %s", name, ", ".join(sorted(known)))


def _describe_errors(exc: ValidationError, origins: Mapping[str, str]) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        message = error["msg"].removeprefix("Value error, ")
        if not loc:  # a check across several settings: its message names them
            lines.append(message)
            continue
        name = str(loc[0])
        setting = ENV_NAMES.get(name, name) + "".join(f"[{part}]" for part in loc[1:])
        origin = f" (from {origins[name]})" if name in origins else ""
        value = masked_input(name, error.get("input"))
        lines.append(f"{setting}={value}{origin} is refused: {message}; accepted: {_accepted(name)}")
    return "invalid configuration:\n  " + "\n  ".join(lines)



_ACCEPTED_TEXT: Final[Mapping[str, str]] = MappingProxyType(
    {
        "db_url": "a SQLAlchemy URL such as postgresql+psycopg://user:password@host:5432/db",
        "bootstrap_servers": "a comma-separated list of host:port",
        "bridge_name": "1 to 100 of [a-zA-Z0-9._-]",
        "topic_template": "a legal topic name, may contain {aggregate_type}: outbox.event.{aggregate_type}",
        "dlq_topic": "a legal topic name, may contain {bridge_name}: outbox.dlq.{bridge_name}",
        "progress_topic": "a legal topic name, may contain {bridge_name}: outbox.progress.{bridge_name}",
        "producer_extra": "a table/JSON object of librdkafka settings with string, number or boolean values",
        "metrics_host": "a host name or IP address to listen on",
        "retention": "a positive number and a unit (s, m, h, d, w), e.g. 90m, 12h, 7d, 2w; unset keeps every row",
        "retention_hold_alert_after": "a positive number and a unit (s, m, h, d, w), e.g. 6h",
        "dead_letter_alert_after": "a positive number and a unit (s, m, h, d, w), e.g. 1h",
        "startup_alert_after": "a positive number and a unit (s, m, h, d, w), e.g. 5m",
        "start_from": "earliest (the oldest row still in the outbox) or a seq, e.g. 1201",
        "cloudevents_source": "a URI-reference without spaces, e.g. urn:orders or https://shop.example/orders",
        "traces_exporter": "none, or OpenTelemetry exporter names separated by commas: otlp, otlp_proto_http, console",
        "topic_retention": "forever (every record kept: retention.ms=-1), or a positive number and a unit "
                           "(s, m, h, d, w), e.g. 30d, 2w",
    }
)


def _accepted(name: str) -> str:
    if name in _ACCEPTED_TEXT:
        return _ACCEPTED_TEXT[name]
    field = BridgeConfig.model_fields.get(name)
    if field is None:
        return "see the documentation"
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(str(member.value) for member in annotation)
    if annotation is bool:
        return "true or false"
    kind = "an integer" if annotation is int else "a number"
    low = next((f">= {c.ge}" for c in field.metadata if isinstance(c, Ge)), "")
    low = low or next((f"> {c.gt}" for c in field.metadata if isinstance(c, Gt)), "")
    high = next((f"<= {c.le}" for c in field.metadata if isinstance(c, Le)), "")
    high = high or next((f"< {c.lt}" for c in field.metadata if isinstance(c, Lt)), "")
    return " and ".join(part for part in (f"{kind} {low}".strip(), high) if part)
