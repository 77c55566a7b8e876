"""The doctor's check of a transactional.id (exactly-once delivery), from the ACLs DescribeAcls lists."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from bridge.kafka.transactional_acl import transactional_id_finding

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
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def describe_acls(self, _filter: Any, request_timeout: float) -> _Answer:
        return _Answer(self.answer)


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
