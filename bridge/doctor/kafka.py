"""The doctor's Kafka checks: the cluster reachable with the bridge's client settings, every topic the outbox
routes to (and the dead-letter topic) safe, and the ACLs the bridge needs.

The topics come from the aggregate types in the outbox, so they are known only once its tables are usable
(`DatabaseChecks.migrated`); the ACL check covers the topics the topic check looked at.
"""

from __future__ import annotations

from datetime import UTC, datetime

from confluent_kafka.admin import AdminClient
from sqlalchemy import select

from bridge.config import BridgeConfig, PoisonPolicy
from bridge.doctor.checklist import KAFKA_TIMEOUT_S, Check, Verdict
from bridge.doctor.database import DatabaseChecks
from bridge.kafka.acl_check import AclFinding, bridge_acl_findings
from bridge.kafka.reachability import quiet_client_settings
from bridge.kafka.topics import TopicGuard
from bridge.kafka.transactional_acl import probed_finding, transactional_id_finding
from bridge.schema import domain_events
from bridge.store.offsets import OffsetStore


class KafkaChecks:
    """Kafka's checks, in order; the first learns whether the cluster answers, the topic check which topics the
    ACL check covers."""

    def __init__(self, config: BridgeConfig, database: DatabaseChecks, timeout_s: float = KAFKA_TIMEOUT_S) -> None:
        self.config = config
        self.database = database
        self.timeout_s = timeout_s
        #: The cluster answered.
        self.reachable = False
        #: The topics the topic check looked at.
        self.checked_topics: list[str] = []
        self._admin: AdminClient | None = None

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            conf = self.config.kafka.client_conf()
            self._admin = AdminClient({**conf, **quiet_client_settings(self.config.bootstrap_servers)})
        return self._admin

    def kafka(self) -> list[Check]:
        admin = self._admin_client()
        try:
            metadata = admin.list_topics(timeout=self.timeout_s)
        finally:
            admin.poll(0)
        self.reachable = True
        brokers = len(metadata.brokers)
        check = Check("kafka", Verdict.OK, f"reachable at {self.config.bootstrap_servers}: {brokers} broker(s), "
                      f"cluster {metadata.cluster_id}")
        if self.config.topics.policy().effective_replication(brokers) > brokers:
            return [check, Check("kafka", Verdict.FAILED,
                                 f"{brokers} broker(s), fewer than BRIDGE_REPLICATION_FACTOR="
                                 f"{self.config.replication_factor}: the bridge cannot create safe topics",
                                 "add brokers, or lower BRIDGE_REPLICATION_FACTOR; for a one-broker development "
                                 "cluster set BRIDGE_ALLOW_SINGLE_BROKER=true")]
        return [check]

    def _event_topics(self) -> list[str]:
        topics: set[str] = set()
        if self.database.migrated:
            with self.database.outbox.connect() as conn:
                for (aggregate_type,) in conn.execute(select(domain_events.c.aggregate_type).distinct()):
                    try:
                        topics.add(self.config.topic_for(aggregate_type))
                    except ValueError:
                        continue  # an unroutable aggregate type is a poison event, reported by the bridge itself
        return sorted(topics)

    def topics(self) -> list[Check]:
        config = self.config
        guard = TopicGuard(config.kafka.client_conf(), config.topics.policy(), timeout=self.timeout_s)
        topics = self._event_topics()
        dead_letter = config.poison_policy is PoisonPolicy.DEAD_LETTER
        if dead_letter:
            topics.append(config.dlq_topic_name)
        self.checked_topics = topics
        if not self.database.migrated:
            checks = [Check("topics", Verdict.SKIPPED, "the outbox could not be read, so its event topics are not "
                            "known")]
            if not topics:
                return checks
        elif not topics:
            return [Check("topics", Verdict.OK, "no events yet, so no topic to check; each is checked (and created "
                          "if allowed) before its first event")]
        else:
            checks = []
        for topic in topics:
            report = guard.check(topic)
            if not report.exists:
                if config.allow_create_topics:
                    checks.append(Check("topics", Verdict.OK, f"{topic}: missing; the bridge creates it safe "
                                        "(BRIDGE_ALLOW_CREATE_TOPICS)"))
                else:
                    checks.append(Check("topics", Verdict.FAILED, f"{topic}: missing and BRIDGE_ALLOW_CREATE_TOPICS "
                                        "is false", "create it: `outbox-bridge topics ensure` as an admin"))
            elif report.problems:
                checks.extend(Check("topics", Verdict.FAILED, p.summary, p.fix) for p in report.problems)
            else:
                kept = ", every record kept" if report.history is None else ""
                checks.append(Check("topics", Verdict.OK,
                                    f"{topic}: replication factor {report.replication_factor}, min.insync.replicas "
                                    f"{report.min_insync_replicas}, unclean leader election off{kept}"))
            checks.extend(Check("topics", Verdict.WARNING, note) for note in report.notes)
            if report.history is not None:
                checks.append(Check("topics", Verdict.WARNING, report.history.summary, report.history.fix))
        return checks

    def acls(self) -> list[Check]:
        user = self.config.kafka.security.get("sasl.username")
        findings = bridge_acl_findings(self._admin_client(), self.checked_topics,
                                       may_create=self.config.allow_create_topics, timeout=self.timeout_s,
                                       principal=None if user is None else str(user))
        transactions = self.config.transactions
        if transactions is not None:  # exactly-once delivery: its transactional.id too
            principal = None if user is None else str(user)
            tid = transactions.transactional_id

            def probe() -> AclFinding:
                # Asking for the id's producer fences the leader's: only when none leads.
                return probed_finding(self.config.kafka.client_conf(), tid, principal, self.timeout_s)

            findings.append(transactional_id_finding(self._admin_client(), tid, principal, self.timeout_s,
                                                     probe=None if self._someone_leads() else probe))
        return [_acl_check(finding) for finding in findings]

    def _someone_leads(self) -> bool:
        """Whether an instance of this bridge name holds the lease (unknown, when the outbox cannot be read: yes)."""
        if not self.database.migrated:
            return True
        row = OffsetStore(self.database.outbox.engine(), self.config.bridge_name).read()
        return bool(row and row.owner and row.lease_expires_at and row.lease_expires_at > datetime.now(UTC))


def _acl_check(finding: AclFinding) -> Check:
    verdict = {"ok": Verdict.OK, "warning": Verdict.WARNING, "failed": Verdict.FAILED}[finding.verdict]
    return Check("acls", verdict, finding.summary, finding.fix)
