"""Credentials masked wherever settings are shown: the start-up log and the refusals of `load_config`.

A URL keeps everything but its password and credential-like query parameters; a secret setting and a secret
producer extra show as the mask.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum
from typing import Any
from urllib.parse import quote

from pydantic import SecretStr
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from bridge.kafka.producer_settings import MASK, is_secret_producer_key

_SECRET_URL_QUERY_KEY = re.compile(r"password|pwd|secret|token|odbc_connect", re.IGNORECASE)


def mask_url(url: str) -> str:
    """Render a SQLAlchemy URL with its password and credential-like query parameters masked."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        # Unparseable: keep the scheme, hide everything up to the last "@", where credentials would be.
        return re.sub(r"^([\w+.-]+://)?.*@", lambda m: f"{m.group(1) or ''}***@", url, flags=re.DOTALL)
    query = {key: MASK if _SECRET_URL_QUERY_KEY.search(key) else value for key, value in parsed.query.items()}
    # SQLAlchemy URL-quotes query values; show the mask as written rather than as %2A%2A...
    return parsed.set(query=query).render_as_string(hide_password=True).replace(quote(MASK), MASK)


def masked_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Settings (by field name) as plain values for the start-up log, with credentials masked."""
    out: dict[str, Any] = {}
    for name, value in settings.items():
        if name == "db_url":
            value = mask_url(value.get_secret_value())
        elif name == "schema_registry_url" and value is not None:
            value = mask_url(value)  # a registry URL may carry user:password@
        elif isinstance(value, SecretStr):
            value = MASK
        elif name == "producer_extra":
            value = {k: MASK if isinstance(v, SecretStr) else v for k, v in value.items()}
        elif isinstance(value, Enum):
            value = value.value
        out[name] = value
    return out


def masked_input(name: str, value: Any) -> str:
    """A value as given (not yet validated) for a refusal, repr-quoted, with credentials masked."""
    if name in ("db_url", "schema_registry_url") and isinstance(value, str | SecretStr):
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        return repr(mask_url(raw))
    if name in ("kafka_sasl_password", "schema_registry_password"):
        return repr(MASK)
    if name == "producer_extra" and isinstance(value, Mapping):
        return repr({k: MASK if is_secret_producer_key(str(k)) else v for k, v in value.items()})
    return repr(value.value if isinstance(value, Enum) else value)
