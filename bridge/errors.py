"""The bridge's exception hierarchy: one root, a few kinds, messages that say what to do."""

from __future__ import annotations


class OutboxError(Exception):
    """Root of every error raised by this project."""


class RefusedError(OutboxError):
    """An operator's request was refused before anything changed; the message says why and what to do."""


class ConfigurationError(OutboxError):
    """A setting is missing, malformed or unsafe; the message names the setting and the fix."""


class StoreError(OutboxError):
    """The outbox database refused or failed an operation."""


class TransientStoreError(StoreError):
    """A database failure worth retrying (connection lost, server restarting, serialization failure)."""


class DatabaseLoginError(StoreError):
    """The database refused the login (wrong password, unknown user, not allowed to connect). Not retried:
    the same login is refused again until an operator fixes the URL or the role."""


class DatabaseTlsError(ConfigurationError):
    """TLS to the database failed as configured (untrusted certificate, wrong host name, missing CA file,
    a server without TLS); not retried, since a certificate does not fix itself."""


class NotMigratedError(ConfigurationError, StoreError):
    """The outbox tables are missing or older than this bridge: run `outbox-bridge migrate` first.

    A configuration error (exit 2, never retried), raised where a store error would be."""


class DuplicateEventError(StoreError):
    """An event with the same event_id is already in the outbox."""


class InvalidEventError(OutboxError):
    """An event handed to the writer is malformed (empty ids or types, payload not JSON)."""


class PublishError(OutboxError):
    """Kafka refused or failed a delivery."""


class PoisonEventError(PublishError):
    """A row that can never be published as it is (too large, bad key, bad JSON, unroutable)."""

    def __init__(self, seq: int, reason: str) -> None:
        super().__init__(f"event seq={seq} cannot be published: {reason}")
        self.seq = seq
        self.reason = reason


class TopicSafetyError(OutboxError):
    """A topic's settings would allow acknowledged writes to be lost."""


class FencedError(OutboxError):
    """Another instance holds the lease for this bridge name; this one must stop writing."""


class SchemaRegistryUnavailableError(PublishError):
    """The schema registry could not be reached or failed on its side; the bridge retries, as for Kafka."""


class SchemaRegistryRefusedError(ConfigurationError):
    """The schema registry refused the bridge's login (401, 403), or no registry's API answers at its URL: not
    retried, as for a refused Kafka login."""


class SchemaMissingError(OutboxError):
    """The registry has no usable schema for an event's subject; each event of that subject is poison until one
    is registered (or, with `BRIDGE_SCHEMA_DIR`, until its file is there)."""
