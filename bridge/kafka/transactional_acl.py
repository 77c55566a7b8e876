"""Whether the bridge's principal may use its transactional.id (exactly-once delivery), read from the ACLs.

No broker answers "which operations may I do" for a transactional.id as it does per topic, and the one request that
would tell (InitProducerId) fences the running bridge's producer. So this reads the ACLs themselves (DescribeAcls),
which needs Describe on the cluster: the doctor run as an administrator, or a principal granted that. Without it,
and when no instance of the bridge leads (so there is no producer to fence), the doctor asks the broker for the
id's producer as a leader would (`probed_finding`); else the finding is a warning naming the command that checks
by hand. Write implies Describe (Kafka's rule), so an allowed Write (or All) is enough; a matching Deny is not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

# From the defining modules: `confluent_kafka.admin` does not re-export these for type checkers.
from confluent_kafka.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from bridge.kafka.acl_check import AclFinding, _code, _grant

_WRITES = frozenset({AclOperation.WRITE, AclOperation.ALL})
_NEEDED = frozenset({AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL})
_LISTS = frozenset({AclOperation.DESCRIBE, AclOperation.ALL})  # on the cluster: may list its ACLs


def covers(binding: Any, transactional_id: str) -> bool:
    """Whether `binding`'s resource pattern names `transactional_id`."""
    if binding.resource_pattern_type == ResourcePatternType.PREFIXED:
        return transactional_id.startswith(binding.name)
    return binding.name in (transactional_id, "*")


def transactional_id_finding(admin: AdminClient, transactional_id: str, principal: str | None,
                             timeout: float, probe: Callable[[], AclFinding] | None = None) -> AclFinding:
    """One finding: may `principal` write `transactional_id`? When the ACLs may not be listed, `probe`'s answer
    (none: a warning)."""
    anything: Any = None  # None matches any name, principal and host; the stubs say str
    wanted = AclBindingFilter(ResourceType.TRANSACTIONAL_ID, anything, ResourcePatternType.ANY, anything, anything,
                              AclOperation.ANY, AclPermissionType.ANY)
    check_by_hand = _by_hand(transactional_id)
    try:
        bindings: list[AclBinding] = admin.describe_acls(wanted, request_timeout=timeout).result(timeout)
        # A principal without Describe on the cluster is answered with no ACLs at all, not refused (seen on
        # Kafka 3.9 in KRaft): whether it may list them is asked apart.
        cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=timeout).result(timeout)
        may_list = bool(_LISTS & set(cluster.authorized_operations or ()))
    except KafkaException as exc:
        if _code(exc) == KafkaError.SECURITY_DISABLED:
            return AclFinding("ok", f"transactional-id {transactional_id}: the cluster runs no authorizer")
        if _code(exc) != KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            raise
        may_list = False
    if not may_list:
        if probe is not None:
            return probe()
        return AclFinding("warning", f"transactional-id {transactional_id}: not checked, the principal may not "
                          "list the cluster's ACLs (Describe on the cluster) and an instance leads (asking for its "
                          "producer would fence it); run the doctor as an administrator, or check by hand",
                          check_by_hand)
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


def probed_finding(conf: Mapping[str, Any], transactional_id: str, principal: str | None,
                   timeout: float) -> AclFinding:
    """Ask the broker for `transactional_id`'s producer (InitProducerId), as a new leader does: allowed, or refused
    naming the grant. It fences any producer of the id, so the doctor asks only when no instance leads."""
    producer = Producer({**conf, "transactional.id": transactional_id})
    try:
        producer.init_transactions(timeout)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if _code(exc) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return AclFinding("failed", f"transactional-id {transactional_id}: refused to User:{principal} (asked as a "
                              "new leader would), which exactly-once delivery needs (the bridge would stop with exit "
                              "9)", _grant(str(principal), [AclOperation.WRITE, AclOperation.DESCRIBE],
                                           f"--transactional-id {transactional_id}"))
        return AclFinding("warning", f"transactional-id {transactional_id}: not checked, the broker answered "
                          f"{err.str() if isinstance(err, KafkaError) else exc}", _by_hand(transactional_id))
    return AclFinding("ok", f"transactional-id {transactional_id}: Write allowed (asked for its producer as a new "
                      "leader would; no instance leads, so none was fenced)")


def _by_hand(transactional_id: str) -> str:
    return f"kafka-acls --bootstrap-server <admin listener> --list --transactional-id {transactional_id}"


def _name(value: Any) -> str:
    return str(getattr(value, "name", value))
