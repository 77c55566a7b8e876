"""A topic just created or fixed is checked again until every broker answers for it.

On a three-broker cluster, metadata from one broker can list a new topic while DescribeConfigs, answered
by another, still says UNKNOWN_TOPIC_OR_PART, and a fixed config can read back old for a moment. CI saw
the first once (`topics ensure` failed with UNKNOWN_TOPIC_OR_PART); these tests replay both answers in
order, which a real cluster gives only by chance.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from bridge.kafka.topics import TopicGuard, TopicPolicy, TopicReport

TOPIC = "orders.order"


class ScriptedGuard(TopicGuard):
    """A guard whose checks answer from a script: a report, or a Kafka error code to raise."""

    def __init__(self, answers: list[TopicReport | int]) -> None:
        # No broker: the admin client is only polled for its log, and never connects before a request.
        super().__init__({"bootstrap.servers": "127.0.0.1:9"}, TopicPolicy(3, 3, False), timeout=5.0)
        self._answers: Iterator[TopicReport | int] = iter(answers)
        self.checks = 0

    def _check(self, topic: str) -> TopicReport:
        self.checks += 1
        answer = next(self._answers)
        if isinstance(answer, int):
            raise KafkaException(KafkaError(answer))
        return answer


def safe() -> TopicReport:
    return TopicReport(TOPIC, exists=True, partitions=3, replication_factor=3, min_insync_replicas=2,
                       unclean_leader_election=False)


def test_a_topic_another_broker_does_not_know_yet_is_checked_again_until_it_does() -> None:
    guard = ScriptedGuard([KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_OR_PART, safe()])

    assert guard.settle(TOPIC) == safe()
    assert guard.checks == 3


def test_a_fixed_config_that_still_reads_old_is_checked_again_until_it_reads_new() -> None:
    stale = TopicReport(TOPIC, exists=True, partitions=3, replication_factor=3, min_insync_replicas=1,
                        unclean_leader_election=True, problems=["min.insync.replicas is 1, needs 2"])
    guard = ScriptedGuard([stale, safe()])

    assert guard.settle(TOPIC).safe
    assert guard.checks == 2


def test_a_problem_fix_cannot_mend_ends_the_wait_at_once() -> None:
    short = TopicReport(TOPIC, exists=True, partitions=3, replication_factor=1, min_insync_replicas=1,
                        unclean_leader_election=False, problems=["replication.factor is 1, needs 3"])
    guard = ScriptedGuard([short])

    assert guard.settle(TOPIC) == short, "no config to wait for: the report is final"


def test_any_other_error_is_raised_at_once() -> None:
    guard = ScriptedGuard([KafkaError._TIMED_OUT, safe()])

    with pytest.raises(KafkaException):
        guard.settle(TOPIC)
    assert guard.checks == 1


def test_the_daemon_waits_the_same_way_for_a_topic_it_just_created(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = TopicReport(TOPIC, exists=False, problems=[f"topic {TOPIC} does not exist"])
    guard = ScriptedGuard([missing, KafkaError.UNKNOWN_TOPIC_OR_PART, safe()])
    created: list[str] = []
    monkeypatch.setattr(guard, "create", created.append)
    monkeypatch.setattr(guard, "_wait_until_led", lambda topic, partitions: None)

    assert guard.ensure(TOPIC, allow_create=True) == safe()
    assert created == [TOPIC]
