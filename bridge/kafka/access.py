"""Kafka refusing the bridge's credentials, certificate or permissions: one clear error each, and a stop.

Retrying does not fix a wrong password, an untrusted certificate or a missing ACL; librdkafka would
reconnect every few dozen milliseconds for ever. So the bridge checks its connection before it leads
(`check_connection`), and any such refusal later (a rotated password, an ACL removed) stops it too, with
an exit code of its own and a message naming the principal, the resource and the fix:

- 7 `AuthenticationFailed`: wrong password or unknown user (SCRAM does not say which, by design);
- 8 `CertificateUntrusted`: the brokers' certificate is not signed by the CA the bridge trusts;
- 9 `AccessDenied`: an ACL is missing for an operation on a topic (or the cluster).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from bridge.errors import OutboxError
from bridge.exits import EXIT_AUTHENTICATION, EXIT_CERTIFICATE, EXIT_DENIED, EXIT_ERROR
from bridge.kafka.reachability import ClientLog, reachability
from bridge.kafka.refusal_text import denial_named, names_refused_credentials, names_untrusted_certificate

AUTHORIZATION_CODES: Final = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
})
CHECK_TIMEOUT_S: Final = 10.0
#: What a refusal names when it does not say which topic.
BRIDGE_TOPICS: Final = "the bridge's topics"
#: Where a refusal does not say which transactional.id: the form the bridge derives from its name.
TRANSACTIONAL_IDS: Final = "outbox-bridge-<BRIDGE_NAME>"


class _RefusalsAside:
    """A client log that passes everything on except authentication and TLS failures (raised instead)."""

    def __init__(self, inner: ClientLog) -> None:
        self._inner = inner

    def log(self, level: int, message: str, *args: Any) -> None:
        if args and names_refused_credentials(str(args[-1])):
            return
        self._inner.log(level, message, *args)


class KafkaAccessError(OutboxError):
    """Kafka refused who the bridge is or what it asked for; retrying cannot help."""

    exit_code = EXIT_ERROR


class AuthenticationFailed(KafkaAccessError):
    exit_code = EXIT_AUTHENTICATION


class CertificateUntrusted(KafkaAccessError):
    exit_code = EXIT_CERTIFICATE


class AccessDenied(KafkaAccessError):
    exit_code = EXIT_DENIED


def principal_of(conf: Mapping[str, Any]) -> str:
    """The principal the brokers see for these client settings, as ACLs name it."""
    user = conf.get("sasl.username")
    if user:
        return f"User:{user}"
    return "User:ANONYMOUS (no SASL user configured: set KAFKA_SASL_USERNAME)"


def is_certificate_failure(err: KafkaError) -> bool:
    return err.code() == KafkaError._SSL or names_untrusted_certificate(err.str())


def is_authentication_failure(err: KafkaError) -> bool:
    return err.code() == KafkaError._AUTHENTICATION and not is_certificate_failure(err)


def access_error(err: KafkaError, conf: Mapping[str, Any]) -> KafkaAccessError | None:
    """The access error a connection-level librdkafka error means, or None if it is not one."""
    servers = conf.get("bootstrap.servers")
    if is_certificate_failure(err):
        ca = conf.get("ssl.ca.location")
        trusted = f"KAFKA_SSL_CA_LOCATION={ca}" if ca else "the system's CA store (KAFKA_SSL_CA_LOCATION is unset)"
        return CertificateUntrusted(
            f"the TLS certificate of Kafka at {servers} is not signed by a CA this client trusts ({trusted}); "
            f"nothing was sent as {principal_of(conf)}. Fix: set KAFKA_SSL_CA_LOCATION to the PEM file of the CA "
            "that signed the brokers' certificates (and check that they name this host)"
        )
    if is_authentication_failure(err):
        mechanism = conf.get("sasl.mechanism", "GSSAPI")
        user = conf.get("sasl.username")
        return AuthenticationFailed(
            f"Kafka at {servers} refused {mechanism} authentication of {principal_of(conf)}: wrong password, or "
            "no such user (the broker does not say which). Fix: check KAFKA_SASL_USERNAME and "
            f"KAFKA_SASL_PASSWORD, or have an administrator create the user: kafka-configs --bootstrap-server "
            f"{servers} --alter --add-config '{mechanism}=[password=...]' --entity-type users "
            f"--entity-name {user or '<user>'}"
        )
    return None


def delivery_refused(code: int, reason: str, conf: Mapping[str, Any],
                     topic: str | None = None) -> KafkaAccessError | None:
    """The access error a failed delivery means (an ACL missing, credentials or a certificate refused), if any:
    sending again would fail the same way. `topic` is the failed record's, when known."""
    named = denial_named(reason)
    if named is not None and named.code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return denied(conf, "Write", f"topic {named.topic or BRIDGE_TOPICS}", "TOPIC_AUTHORIZATION_FAILED")
    if named is not None:
        code = named.code
    if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        # Exactly-once delivery: the producer's transactional.id, which fences the bridge's previous producers.
        return denied(conf, "Write", f"transactional-id {conf.get('transactional.id') or TRANSACTIONAL_IDS}",
                      KafkaError(code).name())
    if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        # The idempotent producer's id: Kafka grants it to a principal that may write some topic.
        return denied(conf, "IdempotentWrite", "cluster (the idempotent producer's id; granted with Write on "
                      "any topic)", KafkaError(code).name())
    if code in AUTHORIZATION_CODES:
        return denied(conf, "Write", f"topic {topic or BRIDGE_TOPICS}", KafkaError(code).name())
    return access_error(KafkaError(code, reason), conf)


def denied(conf: Mapping[str, Any], operation: str, resource: str, code_name: str) -> AccessDenied:
    """Kafka refused `operation` on `resource` (e.g. `topic outbox.event.order`) for lack of an ACL."""
    kind, _, name = resource.partition(" ")
    principal = principal_of(conf)
    grant = f"kafka-acls --bootstrap-server {conf.get('bootstrap.servers')} --add --allow-principal " \
            f"{principal.split(' ')[0]}"
    if kind in ("topic", "group"):
        fix = f"{grant} --operation {operation} --{kind} {name}"
    elif kind == "transactional-id":  # initialising the transactions asks for Describe too
        fix = f"{grant} --operation Write --operation Describe --transactional-id {name.split(' ')[0]}"
    else:  # the cluster: for a producer id, Write on its topics is the least privilege that grants it
        fix = f"{grant} --operation Write --operation Describe --topic outbox.event. --resource-pattern-type prefixed"
    return AccessDenied(
        f"Kafka denied {principal} {operation} on {resource} ({code_name}): no ACL allows it. Fix: grant it, "
        f"e.g. `{fix}` (see docs/OPERATIONS.md, 'Secured Kafka', for each role's ACLs)"
    )


def check_connection(conf: Mapping[str, Any], timeout: float = CHECK_TIMEOUT_S) -> bool:
    """Connect once and ask for metadata: raise a KafkaAccessError if Kafka refuses the credentials or the
    certificate; return False if it did not answer (unreachable: the caller's retries handle that)."""
    errors: list[KafkaError] = []
    # Unreachable brokers are reported as the other clients report them (`reachability`, once in a while);
    # a refusal is this function's to report, as an exception.
    client_log = _RefusalsAside(ClientLog(reachability(str(conf.get("bootstrap.servers", "")))))
    settings: dict[str, Any] = {**conf, "error_cb": errors.append, "logger": client_log}
    admin = AdminClient(settings)
    deadline = time.monotonic() + timeout
    while True:
        # Ask in short rounds: a refusal shows within one, and is reported without waiting out the timeout.
        try:
            admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return True
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb
            for err in [*errors, exc.args[0]]:
                if isinstance(err, KafkaError):
                    refused = access_error(err, conf)
                    if refused is not None:
                        raise refused from None
        if time.monotonic() >= deadline:
            return False


def check_read_access(conf: Mapping[str, Any], topics: list[str], timeout: float = CHECK_TIMEOUT_S) -> None:
    """Raise AccessDenied when the principal may not Read or Describe one of `topics` (a consumer's check
    before it starts: Spark's source would otherwise fail later, with Kafka's bare authorization error).

    Topics that do not exist yet, and clusters without an authorizer, pass: there is nothing to refuse.
    Consumer-group ACLs cannot be asked about before the group exists; a missing one still fails the query."""
    from confluent_kafka.admin._acl import AclOperation

    from bridge.kafka.acl_check import topic_access

    if not topics:
        return
    for access in topic_access(AdminClient(dict(conf)), topics, timeout):
        if access.undescribable:
            raise denied(conf, "Describe", f"topic {access.topic}", "TOPIC_AUTHORIZATION_FAILED")
        # A missing topic, or no authorizer answering for it: nothing to refuse.
        if not access.missing and access.allowed is not None and access.lacks([AclOperation.READ]):
            raise denied(conf, "Read", f"topic {access.topic}", "TOPIC_AUTHORIZATION_FAILED")
