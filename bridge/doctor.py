"""`outbox-bridge doctor`: everything the bridge depends on, checked, each with what to do about it.

A checklist for the first hour and the bad day: the database (reachable, migrated, the never-skip seq
path, the login's privileges), the bridge's state in it (lease, watermark against the head, the
transaction holding the horizon back, retention) and Kafka (reachable with the configured settings,
the topics safe, the ACLs). Each check ends ok, warning or failed, or skipped when what it needs
failed first; any failure makes the command exit non-zero, so it can gate a deployment. Every check is
bounded in time: a database or a cluster that does not answer is reported, never waited for.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from sqlalchemy import select, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError

from bridge.config import BridgeConfig, PoisonPolicy
from bridge.daemon.status import LONG_TRANSACTION_S, holder_age_s
from bridge.errors import OutboxError
from bridge.kafka.acl_check import AclFinding, bridge_acl_findings
from bridge.kafka.reachability import quiet_client_settings
from bridge.kafka.topics import TopicGuard, TopicPolicy
from bridge.schema import as_utc, domain_events
from bridge.store import dead_letters, instances
from bridge.store.access import grant_statements, login, missing_privileges
from bridge.store.deletable import deletable
from bridge.store.engine import make_engine, make_reader
from bridge.store.invariants import never_skip_problems
from bridge.store.offsets import OffsetStore
from bridge.store.revision import RevisionUnreadable, revision_problem, schema_revision

#: Seconds one check may take before it is reported as not answering.
CHECK_TIMEOUT_S: Final = 20.0
#: Seconds a Kafka request may take (metadata, configs, ACLs): well inside CHECK_TIMEOUT_S.
KAFKA_TIMEOUT_S: Final = 8.0


class Verdict(StrEnum):
    OK = "ok"
    WARNING = "warning"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the checklist: what was checked, how it went, what was found and what to do."""

    name: str
    verdict: Verdict
    summary: str
    fix: str | None = None


@dataclass(slots=True)
class _Findings:
    """What earlier checks learnt that later ones need (a check skips when its prerequisite failed)."""

    database: bool = False
    migrated: bool = False
    kafka: bool = False
    watermark: int = 0
    topics: list[str] = field(default_factory=list)


class NoAnswer(Exception):
    """A check did not finish within its time."""


def bounded(function: Callable[[], list[Check]], timeout: float) -> list[Check]:
    """Run one check in a daemon thread and give up after `timeout` seconds (the thread is left behind;
    the command exits soon after, so it cannot hold anything up)."""
    result: list[list[Check]] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(function())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which reports it
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True, name="doctor-check")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise NoAnswer(f"no answer within {timeout:g}s")
    if failure:
        raise failure[0]
    return result[0]


class BridgeDoctor:
    """Runs the bridge's checks in order, each bounded, with what they learn passed along."""

    def __init__(self, config: BridgeConfig, timeout_s: float = CHECK_TIMEOUT_S,
                 kafka_timeout_s: float = KAFKA_TIMEOUT_S) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self.kafka_timeout_s = kafka_timeout_s
        self._found = _Findings()
        self._engine: Engine | None = None
        self._admin: AdminClient | None = None

    # ------------------------------------------------------------------------------------- running

    def run(self) -> list[Check]:
        steps: list[tuple[str, Callable[[], list[Check]], str | None]] = [
            ("database", self._database, None),
            ("schema revision", self._revision, "database"),
            ("never-skip seq path", self._seq_path, "migrated"),
            ("privileges", self._privileges, "migrated"),
            ("lease", self._lease, "migrated"),
            ("watermark", self._watermark, "migrated"),
            ("horizon", self._horizon, "migrated"),
            ("history", self._history, "migrated"),
            ("dead letters", self._dead_letters, "migrated"),
            ("names", self._names, "migrated"),
            ("instances", self._instances, "migrated"),
            ("retention", self._retention, "migrated"),
            ("kafka", self._kafka, None),
            ("topics", self._topics, "kafka"),
            ("acls", self._acls, "kafka"),
        ]
        checks: list[Check] = []
        try:
            for name, step, needs in steps:
                if needs is not None and not getattr(self._found, needs):
                    reason = {"database": "the database is unreachable", "migrated": "the schema is not usable",
                              "kafka": "Kafka is unreachable"}[needs]
                    checks.append(Check(name, Verdict.SKIPPED, f"not checked: {reason}"))
                    continue
                try:
                    checks.extend(bounded(step, self.timeout_s))
                except NoAnswer as exc:
                    checks.append(Check(name, Verdict.FAILED, f"{exc}", _NO_ANSWER_FIX.get(name, _NO_ANSWER_FIX[""])))
                except (OutboxError, DBAPIError, KafkaException) as exc:
                    checks.append(Check(name, Verdict.FAILED, _first_line(exc), _fix_for(name)))
        finally:
            if self._engine is not None:
                self._engine.dispose()
        return checks

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        if self._engine is None:
            url = make_url(self.config.db_url.get_secret_value())
            if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
                url = url.update_query_dict({"connect_timeout": str(max(1, int(self.timeout_s / 2)))})
            self._engine = make_engine(url.render_as_string(hide_password=False))
        with self._engine.connect() as conn:
            yield conn

    # ------------------------------------------------------------------------------------ database

    def _database(self) -> list[Check]:
        with self._connection() as conn:
            version = _server_version(conn)
        self._found.database = True
        return [Check("database", Verdict.OK, f"reachable: {self.config.database.masked_url} ({version})")]

    def _revision(self) -> list[Check]:
        with self._connection() as conn:
            try:
                current = schema_revision(conn)
            except RevisionUnreadable as exc:
                self._found.migrated = True
                return [Check("schema revision", Verdict.WARNING, "the outbox tables exist; the revision is "
                              "unreadable", str(exc))]
        problem = revision_problem(current)
        if problem is not None:
            return [Check("schema revision", Verdict.FAILED, problem.summary, problem.fix)]
        self._found.migrated = True
        return [Check("schema revision", Verdict.OK, f"migrated, at revision {current} (the newest)")]

    def _seq_path(self) -> list[Check]:
        with self._connection() as conn:
            problems = never_skip_problems(conn)
            dialect = conn.dialect.name
        if not problems:
            intact = {
                "postgresql": "sequence CACHE 1 and seq drawn by outbox_next_seq() after the transaction id",
                "mssql": "the INSTEAD OF INSERT trigger takes a rowversion ticket before it draws seqs",
                "sqlite": "seq is AUTOINCREMENT (one writer at a time)",
            }.get(dialect, "nothing to check on this database")
            return [Check("never-skip seq path", Verdict.OK, f"intact: {intact}")]
        return [Check("never-skip seq path", Verdict.FAILED, problem.summary,
                      problem.repair or "re-run `outbox-bridge migrate`, or undo the change by hand")
                for problem in problems]

    def _privileges(self) -> list[Check]:
        retention = self.config.retention_period is not None
        with self._connection() as conn:
            missing = missing_privileges(conn, retention)
            user = login(conn)
        if missing is None:
            return [Check("privileges", Verdict.OK, "SQLite: no logins, the file's permissions decide")]
        if not missing:
            what = "SELECT" + (" and DELETE (retention)" if retention else "") + " on domain_events, its own tables"
            return [Check("privileges", Verdict.OK, f"login {user} has what the bridge uses: {what}")]
        lacking = "; ".join(f"{', '.join(p)} on {t}" for t, p in missing.items())
        return [Check("privileges", Verdict.FAILED, f"login {user} lacks {lacking}",
                      "; ".join(grant_statements(missing, user)))]

    def _lease(self) -> list[Check]:
        row = OffsetStore(self._engine_or_connect(), self.config.bridge_name).read()
        name = self.config.bridge_name
        if row is None:
            return [Check("lease", Verdict.WARNING, f"bridge {name!r} has never run against this database",
                          "start it: `outbox-bridge run` (BRIDGE_NAME names the bridge)")]
        self._found.watermark = row.watermark
        now = datetime.now(UTC)
        renewed = f"renewed {_ago(row.heartbeat_at, now)}" if row.heartbeat_at else "never renewed"
        if row.owner and row.lease_expires_at and row.lease_expires_at > now:
            since = row.status.get("leading_since")
            held = f" since {since}" if since else ""
            return [Check("lease", Verdict.OK, f"held by {row.owner} (epoch {row.epoch}){held}, {renewed}, "
                          f"expires in {(row.lease_expires_at - now).total_seconds():.1f}s")]
        if row.owner:
            return [Check("lease", Verdict.WARNING,
                          f"held by {row.owner} (epoch {row.epoch}) but expired {_ago(row.lease_expires_at, now)}; "
                          f"{renewed}",
                          "that instance died or is stuck: a standby takes over; else start one (`outbox-bridge run`)")]
        return [Check("lease", Verdict.WARNING, f"free: no instance of bridge {name!r} is publishing "
                      f"(last update {_ago(row.updated_at, now)})", "start one: `outbox-bridge run`")]

    def _watermark(self) -> list[Check]:
        engine = self._engine_or_connect()
        row = OffsetStore(engine, self.config.bridge_name).read()
        watermark = row.watermark if row else 0
        reader = make_reader(engine)
        try:
            head_seq = reader.head_seq()
            oldest = reader.oldest_after(watermark)
        finally:
            reader.close()
        lag = max(0, head_seq - watermark)
        age = (datetime.now(UTC) - oldest.occurred_at).total_seconds() if oldest else 0.0
        summary = f"watermark {watermark}, head {head_seq}: {lag} events to publish"
        summary += f", the oldest waiting {age:.0f}s" if lag else ""
        status = row.status if row else {}
        checks = []
        if status.get("halted_at_seq") is not None and not (row and row.owner):
            checks.append(Check("watermark", Verdict.FAILED,
                                f"{summary}; the bridge halted on the poison event seq {status['halted_at_seq']}",
                                "fix or remove that row, or run with BRIDGE_POISON_POLICY=dead-letter; then start "
                                "the bridge"))
        elif watermark > head_seq and head_seq > 0:
            checks.append(Check("watermark", Verdict.WARNING,
                                f"watermark {watermark} is above the newest seq {head_seq}",
                                "if the outbox was restored or recreated, new events up to the watermark would be "
                                "skipped: `outbox-bridge replay --from-seq` to move the watermark back"))
        elif lag and not (row and row.owner):
            checks.append(Check("watermark", Verdict.WARNING, f"{summary}, and no instance is publishing",
                                "start the bridge: `outbox-bridge run`"))
        else:
            checks.append(Check("watermark", Verdict.OK, summary))
        if status.get("last_error"):
            checks.append(Check("watermark", Verdict.WARNING, f"the bridge last reported: {status['last_error']}",
                                "see the bridge's log around that time; `outbox-bridge status` shows the rest"))
        return checks

    def _horizon(self) -> list[Check]:
        engine = self._engine_or_connect()
        reader = make_reader(engine)
        try:
            batch = reader.poll(self._found.watermark, 1)
            holder = reader.horizon_holder() if batch.waiting_on is not None else None
        finally:
            reader.close()
        if batch.waiting_on is None:
            return [Check("horizon", Verdict.OK, "no transaction holds publishing back")]
        age = holder_age_s(holder)
        who = json.dumps({k: v for k, v in (holder or {}).items() if v is not None}, default=str)
        summary = f"seq {batch.waiting_on.first} and later wait for an open transaction: {who}"
        if age is not None and age < LONG_TRANSACTION_S:
            return [Check("horizon", Verdict.OK, summary + f" (open {age:.1f}s: an ordinary commit)")]
        return [Check("horizon", Verdict.WARNING, summary,
                      "commit or end that transaction (PostgreSQL: pg_terminate_backend(pid); SQL Server: KILL "
                      "session); events behind it are published once it ends")]

    def _history(self) -> list[Check]:
        """Whether this name may lead from its watermark: nothing above it deleted, not retired."""
        found = OffsetStore(self._engine_or_connect(), self.config.bridge_name).history(self._found.watermark)
        retired = found.retired_at is not None
        if found.deleted is None and not retired:
            return [Check("history", Verdict.OK, f"every row above the watermark {found.watermark} is still in "
                          "the outbox")]
        summary = (f"bridge name {self.config.bridge_name!r} was retired at {found.retired_at}" if retired
                   else f"above the watermark {found.watermark}, {found.deleted.describe() if found.deleted else ''}")
        return [Check("history", Verdict.FAILED, f"{summary}: the bridge refuses to lead (exit code 10)",
                      "publish what its consumers need from another source, then `outbox-bridge run --start-from "
                      "earliest` (or a seq; audited); see docs/OPERATIONS.md, several bridge names on one outbox")]

    def _dead_letters(self) -> list[Check]:
        with self._connection() as conn:
            found = dead_letters.open_summary(conn, self.config.bridge_name)
        if not found.count:
            return [Check("dead letters", Verdict.OK, "none open")]
        age = (datetime.now(UTC) - found.oldest_at).total_seconds() if found.oldest_at else 0.0
        return [Check("dead letters", Verdict.WARNING,
                      f"{found.count} open, the oldest {age:.0f}s old: their consumers never saw them, and the outbox "
                      "keeps their rows", "`outbox-bridge dead-letters list`; fix the cause, then `dead-letters "
                      "republish SEQ` or `dead-letters resolve SEQ --reason ...`")]

    def _instances(self) -> list[Check]:
        """Instances of this name that are starting and failing a step (each reports its own state)."""
        with self._connection() as conn:
            running = instances.listed(conn, self.config.bridge_name)
        stuck = [i for i in running if i["state"] == instances.STARTING and i["step"]]
        if not stuck:
            states = ", ".join(f"{i['instance']} {i['state']}" for i in running) or "none reported"
            return [Check("instances", Verdict.OK, f"running instances: {states}")]
        return [Check("instances", Verdict.WARNING,
                      f"instance {i['instance']} cannot start: step {i['step']!r} failed {i['attempts']} time(s) "
                      f"since {i['failing_since']} (last at {i['updated_at']}): {i['error']}",
                      "see docs/OPERATIONS.md#outboxbridgenotstarting; a row left by an instance that crashed "
                      "shows an old time and can be ignored")
                for i in stuck]

    def _names(self) -> list[Check]:
        from bridge.names import list_names

        checks = []
        for name in list_names(self.config):
            if name["bridge_name"] == self.config.bridge_name or name["retired_at"]:
                continue
            held = " and holds retention back" if name["holds_retention_back"] else ""
            if name["not_led_for_long"]:
                checks.append(Check("names", Verdict.WARNING,
                                    f"bridge name {name['bridge_name']!r} (watermark {name['watermark']}) has not led "
                                    f"since {name['last_led_at'] or 'it was registered'}{held}",
                                    f"start it, or if it is gone for good: `outbox-bridge names retire "
                                    f"{name['bridge_name']} --reason ...`"))
            else:
                checks.append(Check("names", Verdict.OK, f"bridge name {name['bridge_name']!r} at watermark "
                                    f"{name['watermark']}{held}"))
        return checks or [Check("names", Verdict.OK, f"{self.config.bridge_name!r} is the only bridge name on the "
                                "outbox")]

    def _retention(self) -> list[Check]:
        period = self.config.retention_period
        with self._connection() as conn:
            oldest = conn.execute(select(domain_events.c.occurred_at).order_by(domain_events.c.seq).limit(1)).scalar()
            rows = int(conn.execute(text("SELECT COUNT(*) FROM domain_events")).scalar() or 0)
            held = deletable(conn, self.config.bridge_name) if period is not None else None
        if period is None:
            return [Check("retention", Verdict.OK, f"off: every row is kept ({rows} rows)",
                          "to bound the outbox set BRIDGE_RETENTION (e.g. 7d) or run `outbox-bridge cleanup`")]
        summary = f"rows older than {self.config.retention} are deleted every {self.config.retention_interval_s:g}s " \
                  f"once every bridge name published them ({rows} rows)"
        if held is not None and held.held_back_by is not None:
            return [Check("retention", Verdict.WARNING, f"{summary}; bridge name {held.held_back_by!r} holds it back "
                          f"at seq {held.held_back_at}",
                          f"start that bridge, or retire the name: `outbox-bridge names retire {held.held_back_by} "
                          "--reason ...`")]
        if oldest is not None:
            age = datetime.now(UTC) - as_utc(oldest)
            overdue = age - period
            if overdue.total_seconds() > 2 * self.config.retention_interval_s + 60 and self._found.watermark > 0:
                return [Check("retention", Verdict.WARNING, f"{summary}, yet the oldest row is {age} old",
                              "retention runs only in the active instance: is one running with BRIDGE_RETENTION? "
                              "Rows above the watermark are kept until they are published")]
        return [Check("retention", Verdict.OK, summary)]

    def _engine_or_connect(self) -> Engine:
        if self._engine is None:
            with self._connection():
                pass
        assert self._engine is not None
        return self._engine

    # --------------------------------------------------------------------------------------- kafka

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            conf = self.config.kafka.client_conf()
            self._admin = AdminClient({**conf, **quiet_client_settings(self.config.bootstrap_servers)})
        return self._admin

    def _kafka(self) -> list[Check]:
        admin = self._admin_client()
        try:
            metadata = admin.list_topics(timeout=self.kafka_timeout_s)
        finally:
            admin.poll(0)
        self._found.kafka = True
        brokers = len(metadata.brokers)
        check = Check("kafka", Verdict.OK, f"reachable at {self.config.bootstrap_servers}: {brokers} broker(s), "
                      f"cluster {metadata.cluster_id}")
        policy = TopicPolicy(self.config.topic_partitions, self.config.replication_factor,
                             self.config.allow_single_broker)
        if policy.effective_replication(brokers) > brokers:
            return [check, Check("kafka", Verdict.FAILED,
                                 f"{brokers} broker(s), fewer than BRIDGE_REPLICATION_FACTOR="
                                 f"{self.config.replication_factor}: the bridge cannot create safe topics",
                                 "add brokers, or lower BRIDGE_REPLICATION_FACTOR; for a one-broker development "
                                 "cluster set BRIDGE_ALLOW_SINGLE_BROKER=true")]
        return [check]

    def _event_topics(self) -> list[str]:
        topics: set[str] = set()
        if self._found.migrated:
            with self._connection() as conn:
                for (aggregate_type,) in conn.execute(select(domain_events.c.aggregate_type).distinct()):
                    try:
                        topics.add(self.config.topic_for(aggregate_type))
                    except ValueError:
                        continue  # an unroutable aggregate type is a poison event, reported by the bridge itself
        return sorted(topics)

    def _topics(self) -> list[Check]:
        config = self.config
        guard = TopicGuard(config.kafka.client_conf(), config.topics.policy(), timeout=self.kafka_timeout_s)
        topics = self._event_topics()
        dead_letter = config.poison_policy is PoisonPolicy.DEAD_LETTER
        if dead_letter:
            topics.append(config.dlq_topic_name)
        self._found.topics = topics
        if not self._found.migrated:
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

    def _acls(self) -> list[Check]:
        user = self.config.kafka.security.get("sasl.username")
        findings = bridge_acl_findings(self._admin_client(), self._found.topics,
                                       may_create=self.config.allow_create_topics, timeout=self.kafka_timeout_s,
                                       principal=None if user is None else str(user))
        return [_acl_check(finding) for finding in findings]


# ----------------------------------------------------------------------------------------- helpers

_NO_ANSWER_FIX: Final = {
    "": "check the service and the network; a server that does not answer will stall the bridge too",
    "database": "check OUTBOX_DB_URL, that the server runs and that this host reaches it",
    "kafka": "check that the brokers are running and that KAFKA_BOOTSTRAP_SERVERS names them (locally, `make up`)",
}


def _fix_for(name: str) -> str:
    return {
        "database": "check OUTBOX_DB_URL (host, port, database, user, password), that the server runs and that this "
                    "host reaches it",
        "kafka": "check that the brokers are running, that KAFKA_BOOTSTRAP_SERVERS names them (locally, `make up` "
                 "starts them) and the security settings (KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, "
                 "KAFKA_SSL_CA_LOCATION)",
    }.get(name, "see the error; `outbox-bridge status` and the bridge's log tell more")


def _acl_check(finding: AclFinding) -> Check:
    verdict = {"ok": Verdict.OK, "warning": Verdict.WARNING, "failed": Verdict.FAILED}[finding.verdict]
    return Check("acls", verdict, finding.summary, finding.fix)


def _server_version(conn: Connection) -> str:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return "PostgreSQL " + str(conn.execute(text("SHOW server_version")).scalar())
    if dialect == "mssql":
        return "SQL Server " + str(conn.execute(text("SELECT CAST(SERVERPROPERTY('ProductVersion') AS NVARCHAR(64))"))
                                    .scalar())
    if dialect == "sqlite":
        return "SQLite " + str(conn.execute(text("SELECT sqlite_version()")).scalar())
    conn.execute(text("SELECT 1"))
    return dialect


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "never"
    seconds = (now - as_utc(moment)).total_seconds()
    return f"{seconds:.1f}s ago" if seconds < 120 else f"at {as_utc(moment).isoformat(timespec='seconds')}"


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return str(exc.args[0].str())
    if isinstance(exc, DBAPIError):
        return str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# ------------------------------------------------------------------------------------------- output


def exit_code(checks: list[Check]) -> int:
    """0 when nothing failed (warnings allowed), 1 otherwise."""
    return 1 if any(c.verdict is Verdict.FAILED for c in checks) else 0


def as_json(checks: list[Check]) -> str:
    return json.dumps({"ok": exit_code(checks) == 0, "checks": [asdict(c) for c in checks]}, indent=2)


_MARK: Final = {Verdict.OK: "ok", Verdict.WARNING: "WARN", Verdict.FAILED: "FAIL", Verdict.SKIPPED: "-"}


def render(checks: list[Check], title: str) -> str:
    """The checklist as plain lines: verdict, check, what was found, and the fix under it."""
    width = max(len(c.name) for c in checks) if checks else 0
    lines = [title]
    for check in checks:
        lines.append(f"  {_MARK[check.verdict]:<4}  {check.name:<{width}}  {check.summary}")
        if check.fix and check.verdict is not Verdict.OK:
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {check.fix}")
    failed = sum(c.verdict is Verdict.FAILED for c in checks)
    warned = sum(c.verdict is Verdict.WARNING for c in checks)
    lines.append(f"{failed} failed, {warned} warning(s), {sum(c.verdict is Verdict.OK for c in checks)} ok"
                 + ("" if failed else ": ready"))
    return "\n".join(lines)


def doctor_command(config: BridgeConfig, json_output: bool) -> int:
    """`outbox-bridge doctor [--json]`: print the checklist, return 0 unless a check failed."""
    started = time.monotonic()
    checks = BridgeDoctor(config).run()
    if json_output:
        print(as_json(checks))
    else:
        print(render(checks, f"outbox-bridge doctor: bridge {config.bridge_name!r} "
                             f"(checked in {time.monotonic() - started:.1f}s)"))
    return exit_code(checks)
