"""What a failed request says about the schema registry itself, written once for the bridge and the doctor.

A refused login and a URL where no registry's API answers (a 4xx to the subject list, or a page that is not JSON)
are lasting: the bridge stops, since asking again gets the same answer. An unreachable registry and a failure on
its side (5xx) pass: the bridge retries. A 4xx other than 401 and 403 to a question about one subject is the
registry's answer about that subject, for the caller to judge. Imported only when the format is on.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bridge.errors import SchemaRegistryRefusedError, SchemaRegistryUnavailableError

#: What the client raises when the registry cannot be reached (refused, reset, timed out) after its own retries:
#: an error of the HTTP client it uses (httpx2, or httpx where that is missing), taken from where the library
#: picks it.
UNREACHABLE = httpx.TransportError
#: What a request to the registry fails with: an answer with an error status, no answer, or an answer that is not
#: JSON (the client decodes it, and the decoder's error is a ValueError).
REQUEST_FAILURES: Final = (SchemaRegistryError, UNREACHABLE, ValueError)

_NOT_A_REGISTRY_FIX: Final = ("check BRIDGE_SCHEMA_REGISTRY_URL names the registry's Confluent-compatible API "
                              "(Apicurio serves it under /apis/ccompat/v7)")


class RegistryFault(NamedTuple):
    """What the registry did (`problem`, to follow its name) and what to check (`fix`); a `lasting` fault stops
    the bridge, the others it retries."""

    problem: str
    fix: str
    lasting: bool

    def error(self, where: str) -> SchemaRegistryRefusedError | SchemaRegistryUnavailableError:
        """The bridge's error for it, `where` naming the registry (its URL masked)."""
        if self.lasting:
            return SchemaRegistryRefusedError(f"{where} {self.problem}: {self.fix}")
        return SchemaRegistryUnavailableError(f"{where} {self.problem}; retrying")


def registry_fault(exc: Exception, subject: str | None = None) -> RegistryFault | None:
    """The fault of the registry that one of `REQUEST_FAILURES` shows, or None for a 4xx other than 401 and 403
    (what the registry said about the `subject` asked for)."""
    if isinstance(exc, SchemaRegistryError):
        status = exc.http_status_code
        if status in (401, 403):
            return RegistryFault(f"refused the bridge's login ({exc})",
                                 "check BRIDGE_SCHEMA_REGISTRY_USER and BRIDGE_SCHEMA_REGISTRY_PASSWORD", lasting=True)
        if 400 <= status < 500:
            return None
        on = f" on subject {subject}" if subject is not None else ""
        return RegistryFault(f"failed{on} ({exc})", "check the registry and its log", lasting=False)
    if isinstance(exc, UNREACHABLE):
        return RegistryFault(f"is unreachable ({exc})", "check BRIDGE_SCHEMA_REGISTRY_URL and that the registry runs "
                             "(locally, `make registry-up`)", lasting=False)
    return RegistryFault(f"does not answer as a schema registry (not JSON: {exc})", _NOT_A_REGISTRY_FIX, lasting=True)


def listing_fault(exc: Exception) -> RegistryFault:
    """The fault that one of `REQUEST_FAILURES` shows when the subjects were asked for, where any other 4xx (a 404
    above all) means the URL's path is not a registry's API."""
    fault = registry_fault(exc)
    if fault is None:
        return RegistryFault(f"does not answer as a schema registry ({exc})", _NOT_A_REGISTRY_FIX, lasting=True)
    return fault
