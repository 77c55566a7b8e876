"""Least-privilege ACLs per role, and SCRAM users, through the Kafka admin API.

- the bridge writes and describes only its event topics (a prefix, `outbox.event.` by default) and its
  dead-letter topic; it reads their configs for the topic checks. Idempotent production needs nothing
  more: since Kafka 3.0 a producer id is granted to a principal that may write some topic. Topic creation
  (`outbox-bridge topics ensure`) is the admin principal's job, so the bridge runs with
  `BRIDGE_ALLOW_CREATE_TOPICS=false`.
- a projection reads and describes only its topics and joins only consumer groups under its own prefix
  (`outbox-projection-<name>-`, what the runner and replay use).

These are run by an administrator (the local stack does it as its super user); each call raises
`KafkaException` naming what the broker refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from confluent_kafka.admin import AdminClient

# From the defining modules: `confluent_kafka.admin` does not re-export these for type checkers.
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

#: What a producer needs on a topic it writes, plus DescribeConfigs for the bridge's topic checks.
BRIDGE_TOPIC_OPERATIONS = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
PROJECTION_TOPIC_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE)
SCRAM_ITERATIONS = 8192


def projection_group_prefix(name: str) -> str:
    """The consumer group prefix of a projection: its Spark source and replay's lookups use groups under it.

    Projection names never contain '-', so one projection's prefix never covers another's groups.
    """
    return f"outbox-projection-{name}-"


def _allow(principal: str, resource: ResourceType, name: str, pattern: ResourcePatternType,
           operations: Iterable[AclOperation]) -> list[AclBinding]:
    return [AclBinding(resource, name, pattern, principal, "*", op, AclPermissionType.ALLOW) for op in operations]


def bridge_bindings(principal: str, *, topic_prefix: str, dlq_topic: str, transactional_id: str | None = None,
                    progress_topic: str | None = None,
                    exactly_once_pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> list[AclBinding]:
    """The bridge's ACLs: write, describe and read the configs of its event topics and its dead-letter topic.

    In exactly-once delivery (`transactional_id` and `progress_topic` given) also Write and Describe on its
    transactional.id, and the topic rights plus Read on its progress topic, which a new leader reads back (both
    prefixes with `exactly_once_pattern=PREFIXED`, for any bridge name under them). No cluster-wide
    IdempotentWrite: since Kafka 3.0 (KIP-679) Write on the transactional.id is what grants a transactional
    producer its id."""
    bindings = [
        *_allow(principal, ResourceType.TOPIC, topic_prefix, ResourcePatternType.PREFIXED, BRIDGE_TOPIC_OPERATIONS),
        *_allow(principal, ResourceType.TOPIC, dlq_topic, ResourcePatternType.LITERAL, BRIDGE_TOPIC_OPERATIONS),
    ]
    if (transactional_id is None) != (progress_topic is None):
        raise ValueError("exactly-once delivery needs both the transactional.id and the progress topic")
    if transactional_id is not None and progress_topic is not None:
        bindings += _allow(principal, ResourceType.TRANSACTIONAL_ID, transactional_id, exactly_once_pattern,
                           (AclOperation.WRITE, AclOperation.DESCRIBE))
        bindings += _allow(principal, ResourceType.TOPIC, progress_topic, exactly_once_pattern,
                           (*BRIDGE_TOPIC_OPERATIONS, AclOperation.READ))
    return bindings


def projection_bindings(principal: str, *, topics: Sequence[str] = (), topic_prefix: str | None = None,
                        group_prefix: str) -> list[AclBinding]:
    """A projection's ACLs: read and describe its topics (named, or under a prefix); its groups by prefix."""
    if not topics and topic_prefix is None:
        raise ValueError("give the projection's topics or their prefix")
    bindings = [
        b for topic in topics
        for b in _allow(principal, ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                        PROJECTION_TOPIC_OPERATIONS)
    ]
    if topic_prefix is not None:
        bindings += _allow(principal, ResourceType.TOPIC, topic_prefix, ResourcePatternType.PREFIXED,
                           PROJECTION_TOPIC_OPERATIONS)
    bindings += _allow(principal, ResourceType.GROUP, group_prefix, ResourcePatternType.PREFIXED,
                       (AclOperation.READ, AclOperation.DESCRIBE))
    return bindings


def apply_bindings(admin: AdminClient, bindings: Sequence[AclBinding], timeout: float = 30.0) -> None:
    """Create the ACLs (creating one that exists already is a no-op)."""
    if not bindings:
        return
    for future in admin.create_acls(list(bindings), request_timeout=timeout).values():
        future.result(timeout)


def upsert_scram_users(admin: AdminClient, users: Mapping[str, str], timeout: float = 30.0) -> None:
    """Create each user (or set its password) for SCRAM-SHA-512."""
    if not users:
        return
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS), password.encode()
        )
        for user, password in users.items()
    ]
    for future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
        future.result(timeout)
