"""The doctor's check of a transactional.id (exactly-once delivery), from the ACLs DescribeAcls lists."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from bridge.kafka.acl_check import AclFinding
from bridge.kafka.transactional_acl import probed_finding, transactional_id_finding

pytestmark = pytest.mark.unit

TID = "outbox-bridge-orders"


class _Answer:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self, _timeout: float | None = None) -> Any:
        if isinstance(self.value, KafkaException):
            raise self.value
        return self.value


class _Admin:
    def __init__(self, answer: Any, cluster_operations: list[AclOperation] | None = None) -> None:
        self.answer = answer
        self.cluster_operations = [AclOperation.DESCRIBE] if cluster_operations is None else cluster_operations

    def describe_acls(self, _filter: Any, request_timeout: float) -> _Answer:
        return _Answer(self.answer)

    def describe_cluster(self, include_authorized_operations: bool, request_timeout: float) -> _Answer:
        return _Answer(SimpleNamespace(authorized_operations=self.cluster_operations or None))


def _acl(name: str, op: AclOperation, principal: str = "User:bridge", pattern: ResourcePatternType =
         ResourcePatternType.LITERAL, permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(ResourceType.TRANSACTIONAL_ID, name, pattern, principal, "*", op, permission)


def _finding(answer: Any, principal: str | None = "bridge") -> tuple[str, str, str | None]:
    found = transactional_id_finding(_Admin(answer), TID, principal, 5.0)  # type: ignore[arg-type]
    return found.verdict, found.summary, found.fix


@pytest.mark.parametrize("bindings", [
    [_acl(TID, AclOperation.WRITE), _acl(TID, AclOperation.DESCRIBE)],
    [_acl("outbox-bridge-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)],
    [_acl("*", AclOperation.ALL, principal="User:*")],
], ids=["literal", "prefixed", "wildcard"])
def test_a_granted_write_passes(bindings: list[AclBinding]) -> None:
    assert _finding(bindings)[0] == "ok"


def test_a_missing_grant_fails_with_the_kafka_acls_line() -> None:
    verdict, summary, fix = _finding([_acl(TID, AclOperation.WRITE, principal="User:someone-else"),
                                      _acl("other-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)])
    assert verdict == "failed" and "lacks Write and Describe" in summary
    assert fix is not None and f"--operation Write --operation Describe --transactional-id {TID}" in fix


def test_a_deny_wins_over_an_allow() -> None:
    verdict, summary, fix = _finding([_acl(TID, AclOperation.WRITE),
                                      _acl("*", AclOperation.DESCRIBE, permission=AclPermissionType.DENY)])
    assert verdict == "failed" and "denies User:bridge DESCRIBE" in summary and fix is not None and "--remove" in fix


def test_a_principal_that_may_not_list_acls_gets_a_warning_naming_the_check_by_hand() -> None:
    refused = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))
    verdict, summary, fix = _finding(refused)
    assert verdict == "warning" and "not checked" in summary
    assert fix == f"kafka-acls --bootstrap-server <admin listener> --list --transactional-id {TID}"


def test_a_cluster_without_an_authorizer_passes() -> None:
    assert _finding(KafkaException(KafkaError(KafkaError.SECURITY_DISABLED)))[0] == "ok"


def test_a_principal_that_may_not_list_acls_is_answered_by_the_probe_when_one_may_be_made() -> None:
    refused = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))
    probed = AclFinding("failed", "refused by the probe", None)
    assert transactional_id_finding(_Admin(refused), TID, "bridge", 5.0,  # type: ignore[arg-type]
                                    probe=lambda: probed) is probed


def test_the_probe_of_a_cluster_that_grants_the_id_passes() -> None:
    # librdkafka's mock cluster runs no authorizer: InitProducerId is granted.
    found = probed_finding({"test.mock.num.brokers": 1, "log_level": 3}, TID, "bridge", 10.0)
    assert found.verdict == "ok" and "Write allowed" in found.summary


def test_a_principal_answered_with_no_acls_because_it_may_not_list_them_is_not_told_it_lacks_the_grant() -> None:
    # Kafka answers DescribeAcls from a principal without Describe on the cluster with an empty list.
    found = transactional_id_finding(_Admin([], cluster_operations=[]), TID, "bridge", 5.0)  # type: ignore[arg-type]
    assert found.verdict == "warning" and "not checked" in found.summary
    probed = AclFinding("ok", "granted, by the probe", None)
    assert transactional_id_finding(_Admin([], cluster_operations=[]), TID, "bridge", 5.0,  # type: ignore[arg-type]
                                    probe=lambda: probed) is probed
