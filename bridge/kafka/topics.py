"""Topic safety: the settings that decide whether an acknowledged write can be lost.

A topic the bridge writes must have replication factor N, `min.insync.replicas` N-1 (at least 1) and
unclean leader election off. A one-broker development cluster is allowed only when asked for, loudly.
Topics it creates keep every record unless configured otherwise; a finite history is reported, not refused
(`bridge.kafka.topic_history`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

# From the defining modules: `confluent_kafka.admin` does not re-export these for type checkers.
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.cimpl import NewTopic

from bridge.backoff import Backoff, BackoffPolicy
from bridge.errors import TopicSafetyError
from bridge.kafka.access import AUTHORIZATION_CODES, KafkaAccessError, access_error, denied
from bridge.kafka.reachability import quiet_client_settings
from bridge.kafka.topic_history import (
    FOREVER,
    HistoryFinding,
    Retention,
    creation_configs,
    history_finding,
    lengthening,
)

log = logging.getLogger("bridge.kafka.topics")

#: ListOffsets for the latest offset: answered only by a partition's leader that has the partition.
#: Asked again 20 ms after the first try, then twice as long each time, at most 0.5 s apart.
_LED_WAIT: Final = BackoffPolicy(initial_s=0.02, cap_s=0.5, jitter=0.0)
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """What a safe topic looks like for this bridge."""

    partitions: int
    replication_factor: int
    allow_single_broker: bool = False
    #: `retention.ms` of the topics it creates (-1: every record kept); an existing topic's is never lowered.
    retention_ms: int = FOREVER
    #: How long the outbox keeps published rows (None: for good), for what a topic's finite history means.
    outbox_retention: timedelta | None = None

    def effective_replication(self, brokers: int) -> int:
        if brokers < self.replication_factor and self.allow_single_broker and brokers == 1:
            return 1
        return self.replication_factor

    @staticmethod
    def min_isr(replication: int) -> int:
        return max(1, replication - 1)


@dataclass(frozen=True, slots=True)
class TopicProblem:
    """What makes a topic unsafe, and what to do about it (None where nothing but creating it helps)."""

    summary: str
    fix: str | None = None

    def __str__(self) -> str:
        return self.summary if self.fix is None else f"{self.summary}; {self.fix}"


@dataclass(slots=True)
class TopicReport:
    """The state of one topic against the policy: problems are unsafe, notes are informational."""

    topic: str
    exists: bool
    partitions: int | None = None
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    unclean_leader_election: bool | None = None
    max_message_bytes: int | None = None
    retention_ms: int | None = None
    retention_bytes: int | None = None
    cleanup_policy: str | None = None
    problems: list[TopicProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Set when the topic does not keep every record: a warning, not a problem (the bridge publishes safely).
    history: HistoryFinding | None = None

    @property
    def retention(self) -> Retention | None:
        if self.retention_ms is None or self.retention_bytes is None or self.cleanup_policy is None:
            return None
        return Retention(self.retention_ms, self.retention_bytes, self.cleanup_policy)

    @property
    def safe(self) -> bool:
        return self.exists and not self.problems


class TopicChecker(Protocol):
    """What the daemon needs of a topic guard: check (or create) a topic before its first use."""

    def ensure(self, topic: str, allow_create: bool) -> TopicReport: ...


class TopicGuard:
    """Checks, creates and (where safe) fixes the bridge's topics through the admin API."""

    def __init__(self, client_conf: Mapping[str, Any], policy: TopicPolicy, timeout: float = 30.0) -> None:
        """`client_conf`: bootstrap servers and security settings (`BridgeConfig.kafka.client_conf()`)."""
        self._conf = dict(client_conf)
        self._admin = AdminClient({**self._conf, **quiet_client_settings(str(self._conf["bootstrap.servers"]))})
        self._policy = policy
        self._timeout = timeout

    def broker_count(self) -> int:
        return len(self._admin.list_topics(timeout=self._timeout).brokers)

    def check(self, topic: str) -> TopicReport:
        try:
            return self._check(topic)
        finally:
            self._admin.poll(0)  # serve the client's log (`quiet_client_settings`), so it never piles up

    def _check(self, topic: str) -> TopicReport:
        try:
            metadata = self._admin.list_topics(topic=topic, timeout=self._timeout)
        except KafkaException as exc:
            raise self._refused(exc, "Describe", topic) from exc
        brokers = len(metadata.brokers)
        described = metadata.topics.get(topic)
        if described is not None and described.error is not None and described.error.code() in AUTHORIZATION_CODES:
            raise denied(self._conf, "Describe", f"topic {topic}", described.error.name())
        if described is None or described.error is not None:
            return TopicReport(topic, exists=False, problems=[TopicProblem(f"topic {topic} does not exist")])
        partitions = described.partitions
        rf = min(len(p.replicas) for p in partitions.values()) if partitions else 0
        resource = ConfigResource("topic", topic)
        try:
            config = next(iter(self._admin.describe_configs([resource]).values())).result(self._timeout)
        except KafkaException as exc:
            raise self._refused(exc, "DescribeConfigs", topic) from exc
        report = TopicReport(
            topic,
            exists=True,
            partitions=len(partitions),
            replication_factor=rf,
            min_insync_replicas=int(config["min.insync.replicas"].value),
            unclean_leader_election=config["unclean.leader.election.enable"].value == "true",
            max_message_bytes=int(config["max.message.bytes"].value),
            retention_ms=int(config["retention.ms"].value),
            retention_bytes=int(config["retention.bytes"].value),
            cleanup_policy=config["cleanup.policy"].value,
        )
        assert report.retention is not None
        report.history = history_finding(topic, report.retention, self._policy.retention_ms,
                                         self._policy.outbox_retention)
        wanted_rf = self._policy.effective_replication(brokers)
        if rf < wanted_rf:
            report.problems.append(TopicProblem(
                f"topic {topic}: replication.factor is {rf}, needs {wanted_rf}",
                "recreate the topic or reassign partitions (kafka-reassign-partitions) to add replicas",
            ))
        elif rf == 1:
            report.notes.append(
                f"topic {topic}: replication factor 1 on a {brokers}-broker development cluster; one disk "
                "failure loses acknowledged events (allowed by BRIDGE_ALLOW_SINGLE_BROKER)"
            )
        min_isr = TopicPolicy.min_isr(rf)
        if report.min_insync_replicas is not None and report.min_insync_replicas < min_isr:
            report.problems.append(TopicProblem(
                f"topic {topic}: min.insync.replicas is {report.min_insync_replicas}, needs {min_isr} for "
                f"replication factor {rf}",
                "run `outbox-bridge topics ensure` or kafka-configs --alter --add-config "
                f"min.insync.replicas={min_isr}",
            ))
        if report.unclean_leader_election:
            report.problems.append(TopicProblem(
                f"topic {topic}: unclean.leader.election.enable is true, so a lagging replica may become leader "
                "and drop acknowledged events",
                "set it to false (`outbox-bridge topics ensure`)",
            ))
        if report.partitions is not None and report.partitions < self._policy.partitions:
            report.notes.append(
                f"topic {topic}: {report.partitions} partitions, the bridge's setting is {self._policy.partitions} "
                "(left as is: adding partitions moves keys)"
            )
        return report

    def create(self, topic: str) -> None:
        brokers = self.broker_count()
        rf = self._policy.effective_replication(brokers)
        if rf > brokers:
            raise TopicSafetyError(
                f"cannot create topic {topic} with replication factor {rf} on a {brokers}-broker cluster; "
                "add brokers, lower BRIDGE_REPLICATION_FACTOR, or for development set BRIDGE_ALLOW_SINGLE_BROKER=true"
            )
        new = NewTopic(
            topic,
            num_partitions=self._policy.partitions,
            replication_factor=rf,
            config={
                "min.insync.replicas": str(TopicPolicy.min_isr(rf)),
                "unclean.leader.election.enable": "false",
                **creation_configs(self._policy.retention_ms),
            },
        )
        try:
            self._admin.create_topics([new])[topic].result(self._timeout)
        except KafkaException as exc:
            if exc.args[0].code() in AUTHORIZATION_CODES:
                refused = denied(self._conf, "Create", f"topic {topic}", exc.args[0].name())
                raise type(refused)(
                    f"{refused} Or, as the bridge should not create topics: run `outbox-bridge topics ensure` as "
                    "an admin principal and set BRIDGE_ALLOW_CREATE_TOPICS=false"
                ) from exc
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise
        log.info("created topic", extra={"topic": topic, "partitions": self._policy.partitions, "rf": rf,
                                         "retention_ms": self._policy.retention_ms})

    def _refused(self, exc: KafkaException, operation: str, topic: str) -> Exception:
        """The access error `exc` means (denied, bad credentials, untrusted certificate), else `exc` itself."""
        err = exc.args[0] if exc.args else None
        if not isinstance(err, KafkaError):
            return exc
        if err.code() in AUTHORIZATION_CODES:
            return denied(self._conf, operation, f"topic {topic}", err.name())
        refused: KafkaAccessError | None = access_error(err, self._conf)
        return refused or exc

    def fix(self, report: TopicReport) -> list[TopicProblem]:
        """Set min.insync.replicas and unclean leader election where wrong, and lengthen a retention shorter than
        the policy's (never shorten one); return what is left unfixed."""
        entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                   for name, value in self.fixes(report).items()]
        if entries:
            resource = ConfigResource("topic", report.topic, incremental_configs=entries)
            next(iter(self._admin.incremental_alter_configs([resource]).values())).result(self._timeout)
        after = self.check(report.topic)
        return after.problems

    def settle(self, topic: str) -> TopicReport:
        """Check a topic just created or fixed until it exists with nothing left that `fix` would set, or the
        guard's timeout passes; return the last report.

        Brokers learn a new topic, and new configs, from the controller a moment later. Metadata from one
        broker may list a topic while DescribeConfigs, answered by another, still says UNKNOWN_TOPIC_OR_PART,
        or still shows the configs from before the fix. Both are waited out; any other error is raised."""
        deadline = time.monotonic() + self._timeout
        delay = 0.05
        while True:
            try:
                report = self.check(topic)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() >= deadline:
                    raise
            else:
                if (report.exists and not self.fixes(report)) or time.monotonic() >= deadline:
                    return report
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _wait_until_led(self, topic: str, partitions: int) -> None:
        """Wait until the leader of every partition of a topic just created answers for it (ListOffsets).

        The broker publishes a new partition's leader in its metadata a moment before it has the partition
        itself. A new producer's first request sent in between fails and is retried, while its next request
        may be appended first; the broker accepts that as the producer's first batch, and librdkafka then
        reports the retried one delivered without an offset although it was never appended. The publisher
        does not count such a report (`bridge.kafka.publisher.unconfirmed`), but it costs a producer rebuild,
        duplicates and, for keys whose later events were appended, first deliveries out of seq order, so
        nothing is sent before the partitions are there."""
        pending = {TopicPartition(topic, partition) for partition in range(partitions)}
        deadline = time.monotonic() + self._timeout
        backoff = Backoff(_LED_WAIT)
        while pending:
            answered = self._admin.list_offsets({tp: _LATEST for tp in pending},
                                                request_timeout=self._timeout)
            for partition, future in answered.items():
                try:
                    future.result(self._timeout)
                except KafkaException as exc:
                    if exc.args[0].code() in AUTHORIZATION_CODES:
                        # ListOffsets needs Describe on the topic; without it there is nothing to wait with.
                        log.warning("cannot see whether a new topic's partitions are led (no Describe ACL); "
                                    "sending at once", extra={"topic": topic, "error": exc.args[0].name()})
                        return
                    continue  # not led yet: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PART, LEADER_NOT_AVAILABLE
                pending.discard(partition)
            if not pending:
                return
            if time.monotonic() >= deadline:
                log.warning("partitions of a new topic have no leader yet; sending anyway (the producer retries)",
                            extra={"topic": topic, "partitions": sorted(tp.partition for tp in pending)[:20]})
                return
            time.sleep(backoff.next_delay())

    def ensure(self, topic: str, allow_create: bool) -> TopicReport:
        """Check a topic, creating it if missing and allowed; raise TopicSafetyError if it is unsafe."""
        report = self.check(topic)
        if not report.exists:
            if not allow_create:
                raise TopicSafetyError(
                    f"topic {topic} does not exist and BRIDGE_ALLOW_CREATE_TOPICS is false; create it with "
                    f"replication factor {self._policy.replication_factor} or run `outbox-bridge topics ensure`"
                )
            self.create(topic)
            report = self.settle(topic)
            if report.exists:
                self._wait_until_led(topic, report.partitions or 0)
        if report.problems:
            raise TopicSafetyError("; ".join(map(str, report.problems)))
        for note in report.notes:
            log.warning(note)
        if report.history is not None:
            log.warning(str(report.history))
        return report

    def fixes(self, report: TopicReport) -> dict[str, str]:
        """The topic configs `fix` sets on this topic: those the report shows unsafe, and a retention shorter than
        the policy's."""
        fixes = _safety_fixes(report)
        if report.retention is not None:
            fixes |= lengthening(report.retention, self._policy.retention_ms)
        return fixes


def _safety_fixes(report: TopicReport) -> dict[str, str]:
    """The configs that make this topic safe: min.insync.replicas and unclean leader election."""
    fixes = {}
    min_isr = TopicPolicy.min_isr(report.replication_factor or 1)
    if report.min_insync_replicas is not None and report.min_insync_replicas < min_isr:
        fixes["min.insync.replicas"] = str(min_isr)
    if report.unclean_leader_election:
        fixes["unclean.leader.election.enable"] = "false"
    return fixes
