"""Enumerations read from settings, where `debug` means `DEBUG` and `sasl_ssl` means `SASL_SSL`."""

from __future__ import annotations

from enum import StrEnum
from typing import Self


class AnyCaseStrEnum(StrEnum):
    """A string enum whose values are upper case and that also accepts them written in any case (pydantic asks
    `_missing_` before it refuses a value)."""

    @classmethod
    def _missing_(cls, value: object) -> Self | None:
        if not isinstance(value, str):
            return None
        return next((member for member in cls if member.value == value.upper()), None)
