"""Whether the bridge's principal may use its transactional.id (exactly-once delivery), read from the ACLs.

No broker answers "which operations may I do" for a transactional.id as it does per topic, and the one request that
would tell (InitProducerId) fences the running bridge's producer. So this reads the ACLs themselves (DescribeAcls),
which needs Describe on the cluster: the doctor run as an administrator, or a principal granted that. Without it
the finding is a warning naming the command that checks by hand. Write implies Describe (Kafka's rule), so an
allowed Write (or All) is enough; a matching Deny is not.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

# From the defining modules: `confluent_kafka.admin` does not re-export these for type checkers.
from confluent_kafka.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from bridge.kafka.acl_check import AclFinding, _code, _grant

_WRITES = frozenset({AclOperation.WRITE, AclOperation.ALL})
_NEEDED = frozenset({AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL})


def covers(binding: Any, transactional_id: str) -> bool:
    """Whether `binding`'s resource pattern names `transactional_id`."""
    if binding.resource_pattern_type == ResourcePatternType.PREFIXED:
        return transactional_id.startswith(binding.name)
    return binding.name in (transactional_id, "*")


def transactional_id_finding(admin: AdminClient, transactional_id: str, principal: str | None,
                             timeout: float) -> AclFinding:
    """One finding: may `principal` write `transactional_id`?"""
    anything: Any = None  # None matches any name, principal and host; the stubs say str
    wanted = AclBindingFilter(ResourceType.TRANSACTIONAL_ID, anything, ResourcePatternType.ANY, anything, anything,
                              AclOperation.ANY, AclPermissionType.ANY)
    check_by_hand = f"kafka-acls --bootstrap-server <admin listener> --list --transactional-id {transactional_id}"
    try:
        bindings: list[AclBinding] = admin.describe_acls(wanted, request_timeout=timeout).result(timeout)
    except KafkaException as exc:
        if _code(exc) == KafkaError.SECURITY_DISABLED:
            return AclFinding("ok", f"transactional-id {transactional_id}: the cluster runs no authorizer")
        if _code(exc) == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            return AclFinding("warning", f"transactional-id {transactional_id}: not checked, the principal may not "
                              "list the cluster's ACLs (Describe on the cluster); run the doctor as an "
                              "administrator, or check by hand", check_by_hand)
        raise
    if principal is None:
        return AclFinding("warning", f"transactional-id {transactional_id}: not checked, no principal "
                          "(KAFKA_SASL_USERNAME) to check it for", check_by_hand)
    mine = [b for b in bindings if b.principal in (f"User:{principal}", "User:*") and covers(b, transactional_id)]
    denied = [b for b in mine if b.permission_type == AclPermissionType.DENY and b.operation in _NEEDED]
    if denied:
        deny = denied[0]
        return AclFinding("failed", f"transactional-id {transactional_id}: an ACL denies {deny.principal} "
                          f"{_name(deny.operation)} on it (pattern {_name(deny.resource_pattern_type)} {deny.name!r})",
                          f"remove that Deny: kafka-acls --bootstrap-server <admin listener> --remove "
                          f"--deny-principal {deny.principal} --operation {_name(deny.operation).title()} "
                          f"--transactional-id {deny.name}")
    if any(b.permission_type == AclPermissionType.ALLOW and b.operation in _WRITES for b in mine):
        return AclFinding("ok", f"transactional-id {transactional_id}: Write (and so Describe) allowed")
    return AclFinding("failed", f"transactional-id {transactional_id}: User:{principal} lacks Write and Describe, "
                      "which exactly-once delivery needs (the bridge would stop with exit 9)",
                      _grant(principal, [AclOperation.WRITE, AclOperation.DESCRIBE],
                             f"--transactional-id {transactional_id}"))


def _name(value: Any) -> str:
    return str(getattr(value, "name", value))
