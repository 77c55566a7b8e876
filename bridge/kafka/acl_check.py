"""Whether the cluster's ACLs let the bridge's principal do what the bridge does, asked of the cluster.

The bridge writes its topics, describes them and reads their configs (the topic guard); an idempotent
producer needs nothing more since Kafka 3.0. Creating a missing topic needs CREATE, on the cluster or
on a topic prefix. The brokers answer "which operations may I do" per topic (`authorized_operations`),
so this needs no right to read the ACLs themselves. Without an authorizer (or as a super user) the
cluster allows every operation, even Alter and ClusterAction on the cluster, and the check says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

# From the defining modules: `confluent_kafka.admin` does not re-export these for type checkers.
from confluent_kafka.admin._acl import AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

#: What the bridge does on each of its topics.
TOPIC_OPERATIONS: Final = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)


@dataclass(frozen=True, slots=True)
class AclFinding:
    verdict: Literal["ok", "warning", "failed"]
    summary: str
    fix: str | None = None


#: Cluster operations only a super user has, or everyone when no authorizer runs.
_UNRESTRICTED: Final = frozenset({AclOperation.ALTER, AclOperation.CLUSTER_ACTION})


def authorizer_disabled(admin: AdminClient, timeout: float) -> bool:
    """True when the cluster says it runs no authorizer (DescribeAcls refused with SECURITY_DISABLED).

    Some brokers answer an empty list instead, so False does not prove that one runs."""
    # None matches any name, principal and host; the stubs say str.
    anything: Any = None
    everything = AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY, anything, anything,
                                  AclOperation.ANY, AclPermissionType.ANY)
    try:
        admin.describe_acls(everything, request_timeout=timeout).result(timeout)
    except KafkaException as exc:
        if _code(exc) == KafkaError.SECURITY_DISABLED:
            return True
        if _code(exc) == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            return False  # an authorizer refused us the ACL listing: it runs
        raise
    return False


@dataclass(frozen=True, slots=True)
class TopicAccess:
    """What the cluster says the principal may do on one topic."""

    topic: str
    #: The cluster does not know the topic (yet): there is nothing to refuse.
    missing: bool = False
    #: The principal may not even describe it (TOPIC_AUTHORIZATION_FAILED).
    undescribable: bool = False
    #: The operations allowed; None when no authorizer answered for the topic.
    allowed: frozenset[AclOperation] | None = None

    def lacks(self, operations: Sequence[AclOperation]) -> list[AclOperation]:
        """Which of `operations` the principal may not do (none when everything is allowed)."""
        allowed = self.allowed or frozenset()
        return [] if AclOperation.ALL in allowed else [op for op in operations if op not in allowed]


def topic_access(admin: AdminClient, topics: Sequence[str], timeout: float) -> list[TopicAccess]:
    """Each topic's authorized operations, from one DescribeTopics request."""
    futures = admin.describe_topics(TopicCollection(list(topics)), include_authorized_operations=True,
                                    request_timeout=timeout)
    found: list[TopicAccess] = []
    for topic, future in futures.items():
        try:
            description = future.result(timeout)
        except KafkaException as exc:
            if _code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                found.append(TopicAccess(topic, missing=True))
                continue
            if _code(exc) == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                found.append(TopicAccess(topic, undescribable=True))
                continue
            raise
        operations = description.authorized_operations
        found.append(TopicAccess(topic, allowed=None if operations is None else frozenset(operations)))
    return found


def _code(exc: KafkaException) -> int | None:
    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def _names(operations: Sequence[AclOperation]) -> str:
    return ", ".join(op.name for op in operations)


def _grant(principal: str, operations: Sequence[AclOperation], resource: str) -> str:
    ops = " ".join(f"--operation {op.name.title().replace('_', '')}" for op in operations)
    return f"kafka-acls --bootstrap-server <admin listener> --add --allow-principal User:{principal} {ops} {resource}"


def bridge_acl_findings(admin: AdminClient, topics: Sequence[str], *, may_create: bool, timeout: float,
                        principal: str | None = None) -> list[AclFinding]:
    """One finding per topic (and one for topic creation when a topic is missing and may be created)."""
    if authorizer_disabled(admin, timeout):
        return [AclFinding("ok", "the cluster runs no authorizer: ACLs are not enforced, so nothing is refused")]
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=timeout).result(timeout)
    cluster_operations = set(cluster.authorized_operations or ())
    if cluster_operations >= _UNRESTRICTED:
        return [AclFinding("ok", "the principal may do everything on this cluster, even Alter and ClusterAction: "
                           "no authorizer runs, or it is a super user; ACLs restrict nothing for the bridge")]
    who = principal or "<the bridge's principal>"
    if not topics:
        return [AclFinding("ok", "an authorizer runs; no topic of the bridge exists yet to ask about")]
    findings: list[AclFinding] = []
    missing_topics: list[str] = []
    for access in topic_access(admin, topics, timeout):
        topic = access.topic
        if access.missing:
            missing_topics.append(topic)
        elif access.undescribable:
            findings.append(AclFinding("failed", f"{topic}: the principal may not even describe it",
                                       _grant(who, TOPIC_OPERATIONS, f"--topic {topic}")))
        elif lacking := access.lacks(TOPIC_OPERATIONS):
            findings.append(AclFinding("failed", f"{topic}: the principal lacks {_names(lacking)}",
                                       _grant(who, lacking, f"--topic {topic}")))
        else:
            findings.append(AclFinding("ok", f"{topic}: {_names(TOPIC_OPERATIONS)} allowed"))
    if missing_topics and may_create and AclOperation.CREATE not in cluster_operations:
        findings.append(AclFinding(
            "warning",
            f"{', '.join(missing_topics)} missing, and the principal has no CREATE on the cluster (a prefixed "
            "CREATE on topics would do, but cannot be asked about before the topic exists)",
            "create the topics as an admin (`outbox-bridge topics ensure`) and set "
            "BRIDGE_ALLOW_CREATE_TOPICS=false, or "
            + _grant(who, [AclOperation.CREATE], "--topic <prefix> --resource-pattern-type prefixed"),
        ))
    return findings
