"""The bridge's least-privilege ACLs, and exactly-once delivery's additions to them."""

from __future__ import annotations

import pytest
from confluent_kafka.admin._acl import AclOperation
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from bridge.kafka.acls import bridge_bindings

pytestmark = pytest.mark.unit


def _rights(principal: str = "User:bridge", **kw: str) -> set[tuple[ResourceType, str, ResourcePatternType,
                                                                       AclOperation]]:
    return {(b.restype, b.name, b.resource_pattern_type, b.operation)
            for b in bridge_bindings(principal, topic_prefix="outbox.event.", dlq_topic="outbox.dlq.orders", **kw)}


def test_at_least_once_the_bridge_has_no_transactional_rights() -> None:
    assert not {r for r in _rights() if r[0] is ResourceType.TRANSACTIONAL_ID}
    assert (ResourceType.TOPIC, "outbox.event.", ResourcePatternType.PREFIXED, AclOperation.WRITE) in _rights()


def test_exactly_once_adds_its_transactional_id_and_its_progress_topic_and_nothing_cluster_wide() -> None:
    added = _rights(transactional_id="outbox-bridge-orders", progress_topic="outbox.progress.orders") - _rights()
    literal = ResourcePatternType.LITERAL
    assert added == {
        (ResourceType.TRANSACTIONAL_ID, "outbox-bridge-orders", literal, AclOperation.WRITE),
        (ResourceType.TRANSACTIONAL_ID, "outbox-bridge-orders", literal, AclOperation.DESCRIBE),
        *{(ResourceType.TOPIC, "outbox.progress.orders", literal, op)
          for op in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.READ)},
    }


def test_one_of_the_two_without_the_other_is_refused() -> None:
    with pytest.raises(ValueError, match=r"both the transactional\.id and the progress topic"):
        bridge_bindings("User:bridge", topic_prefix="outbox.event.", dlq_topic="d", transactional_id="x")


def test_exactly_once_rights_can_be_granted_by_prefix_for_every_bridge_name() -> None:
    prefixed = ResourcePatternType.PREFIXED
    rights = _rights(transactional_id="outbox-bridge-", progress_topic="outbox.progress.",
                     exactly_once_pattern=prefixed)
    assert (ResourceType.TRANSACTIONAL_ID, "outbox-bridge-", prefixed, AclOperation.WRITE) in rights
    assert (ResourceType.TOPIC, "outbox.progress.", prefixed, AclOperation.READ) in rights
    assert (ResourceType.TOPIC, "outbox.dlq.orders", ResourcePatternType.LITERAL, AclOperation.WRITE) in rights
