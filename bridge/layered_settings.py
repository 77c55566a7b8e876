"""What the bridge's configuration and the projections' settings share: a pydantic-settings model that reads
nothing but its arguments, and a TOML file source whose syntax errors name the file.

Each `load_*` function layers the TOML file, the environment (its own `ENV_NAMES`) and the flags itself, so
that it can say where a refused value came from; constructing a model directly stays pure (tests, code).
"""

from __future__ import annotations

import tomllib
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from bridge.errors import ConfigurationError


class LayeredSettings(BaseSettings):
    """Frozen settings validated once; unknown names are refused; only the constructor's arguments count."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_default=True, case_sensitive=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment and file are layered by the load function only, so direct construction is pure.
        return (init_settings,)


class TomlFile(TomlConfigSettingsSource):
    """A TOML settings file; one that does not parse is a ConfigurationError naming it."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        try:
            return super()._read_file(file_path)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(f"configuration file {file_path} is not valid TOML: {exc}") from None
