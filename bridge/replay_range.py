"""`outbox-bridge replay --mode range`: publish a range of events again, to their own topics or one named
topic, without touching the live watermark.

Every target topic is checked before anything is sent, by the topic guard the daemon uses: a missing one is
created with the bridge's safe settings when `BRIDGE_ALLOW_CREATE_TOPICS` allows and the principal may
create topics, or the command refuses (exit 2) naming `outbox-bridge topics ensure --topic ...`; an unsafe
one is refused as the daemon refuses it (exit 4). The dry run reports the same verdicts. Each record is
checked against its topic's own size limit, and a range that does not all arrive says whether a retry can
help.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import KafkaError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from sqlalchemy import select

from bridge.config import BridgeConfig, KafkaConnection, TopicSection
from bridge.core.records import DEFAULT_MAX_MESSAGE_BYTES, OutboxRow
from bridge.daemon.assemble import schema_values
from bridge.daemon.poison import producer_limit, record_builder
from bridge.errors import ConfigurationError, OutboxError, PoisonEventError
from bridge.kafka.access import KafkaAccessError, check_connection
from bridge.kafka.producer_settings import producer_settings
from bridge.kafka.publisher import KafkaPublisher
from bridge.kafka.topics import TopicGuard, TopicPolicy, TopicReport
from bridge.replay import ReplayRequest, _audit, _filters, plan_replay
from bridge.schema import domain_events
from bridge.store.engine import make_engine
from bridge.store.rows import ROW_COLUMNS

console = Console(stderr=True)


class TopicMissingError(ConfigurationError):
    """A replay's target topic does not exist and the bridge may not (or cannot) create it: nothing was sent."""


def _guard(kafka: KafkaConnection, topics: TopicSection) -> TopicGuard:
    return TopicGuard(kafka.client_conf(), topics.policy())


def _fix(topic: str) -> str:
    return f"create it first, as a principal that may: `outbox-bridge topics ensure --topic {topic}`"


def verdict(topics: TopicSection, report: TopicReport) -> str:
    """What a range replay would do about a target topic, in words (the dry run shows it)."""
    if not report.exists:
        if not topics.allow_create:
            return f"missing, and BRIDGE_ALLOW_CREATE_TOPICS is false: refused; {_fix(report.topic)}"
        return (f"missing: created before sending, replication factor {topics.replication_factor}, "
                f"min.insync.replicas {TopicPolicy.min_isr(topics.replication_factor)}")
    if report.problems:
        return "unsafe: refused as the bridge refuses it: " + "; ".join(map(str, report.problems))
    return "ok"


def check_topics(config: BridgeConfig, topics: list[str]) -> dict[str, str]:
    """Each target topic's verdict, for the dry run (nothing is created)."""
    check_connection(config.kafka.client_conf())
    guard = _guard(config.kafka, config.topics)
    return {topic: verdict(config.topics, guard.check(topic)) for topic in topics}


def _ensure_topics(guard: TopicGuard, topics: list[str], allow_create: bool) -> dict[str, int]:
    """Create what is missing (if allowed), refuse what is unsafe; return each topic's size limit."""
    limits = {}
    for topic in topics:
        report = guard.check(topic)
        if not report.exists and not allow_create:
            raise TopicMissingError(f"topic {topic} does not exist and BRIDGE_ALLOW_CREATE_TOPICS is false, so "
                                    f"nothing was sent; {_fix(topic)}")
        try:
            report = guard.ensure(topic, allow_create)  # TopicSafetyError when unsafe
        except KafkaAccessError as exc:
            raise TopicMissingError(f"topic {topic} does not exist and this principal may not create it ({exc}); "
                                    f"nothing was sent; {_fix(topic)}") from exc
        limits[topic] = report.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
    return limits


@dataclass(slots=True)
class _Outcome:
    delivered: int = 0
    failures: list[tuple[int, str, bool]] | None = None  # seq, why, whether sending again can help

    def failed(self, seq: int, why: str, retriable: bool) -> None:
        if self.failures is None:
            self.failures = []
        self.failures.append((seq, why, retriable))


def publish_range(config: BridgeConfig, request: ReplayRequest, show_progress: bool = True) -> dict[str, Any]:
    """Publish a range to its topics (or one named topic) without touching the live watermark."""
    plan = plan_replay(config, request)
    check_connection(config.kafka.client_conf())  # refused credentials or certificate: one clear error, now
    most = producer_limit(config.producer_extra)
    ensured = _ensure_topics(_guard(config.kafka, config.topics), plan["topics"], config.allow_create_topics)
    limits = {topic: min(limit, most) for topic, limit in ensured.items()}
    outcome = _Outcome()

    def on_delivery(seq: int, _generation: int, err: KafkaError | None) -> None:
        if err is None:
            outcome.delivered += 1
        else:
            outcome.failed(seq, err.str(), err.retriable() or err.code() == KafkaError._MSG_TIMED_OUT)

    def route(aggregate_type: str) -> str:
        return request.topic or config.topic_for(aggregate_type)

    build_record = record_builder(config.topics, schema_values(config))  # in the live bridge's record format
    resolved = replace(request, from_seq=plan["from_seq"], to_seq=plan["to_seq"])
    engine = make_engine(config.db_url.get_secret_value())
    publisher = KafkaPublisher(producer_settings(config.producer, client_id=f"outbox-replay-{config.bridge_name}").conf,
                               on_delivery)
    try:
        with _progress(show_progress) as progress:
            task = progress.add_task("replaying", total=plan["events"])
            after = plan["from_seq"] - 1
            while True:
                with engine.connect() as conn:
                    batch = [OutboxRow.from_mapping(r) for r in conn.execute(
                        select(*ROW_COLUMNS).where(_filters(resolved, plan["from_seq"], plan["to_seq"]),
                                                   domain_events.c.seq > after)
                        .order_by(domain_events.c.seq).limit(1000)).mappings()]
                if not batch:
                    break
                for row in batch:
                    try:
                        record = build_record(row, route, _limit_for(row.aggregate_type, route, limits, most))
                    except PoisonEventError as exc:
                        outcome.failed(row.seq, exc.reason, False)
                        continue
                    publisher.send(record, 0)
                    publisher.poll(0)
                after = batch[-1].seq
                progress.update(task, advance=len(batch))
            remaining = publisher.flush(config.delivery_timeout_ms / 1000)
        if remaining or outcome.failures or publisher.failure:
            raise OutboxError(_incomplete(plan, outcome, remaining, publisher.failure))
        audit_id = _audit(engine, config.bridge_name, resolved, "done", plan["to_seq"])
        return plan | {"audit_id": audit_id, "delivered": outcome.delivered}
    finally:
        # Everything was flushed above (or the command failed): finish the producer and its threads now.
        publisher.close(0)
        engine.dispose()


def _incomplete(plan: dict[str, Any], outcome: _Outcome, remaining: int, failure: Any) -> str:
    failures = outcome.failures or []
    lasting = [(seq, why) for seq, why, retriable in failures if not retriable]
    said = f"range replay incomplete: {outcome.delivered} of {plan['events']} delivered, {remaining} unsent"
    if lasting:
        named = "; ".join(f"seq {seq}: {why}" for seq, why in lasting[:3])
        return (f"{said}; {len(lasting)} can never be sent as they are ({named}): fix those rows or their topic's "
                "limits first, then replay again (the live watermark is untouched)")
    errors = "; ".join(f"seq {seq}: {why}" for seq, why, _ in failures[:3]) or str(failure or "none")
    return f"{said}, errors: {errors}; the live watermark is untouched: retry the command once Kafka is healthy"


def _limit_for(aggregate_type: str, route: Any, limits: dict[str, int], most: int) -> int:
    try:
        return limits.get(route(aggregate_type), most)
    except ValueError:  # unroutable: build_record says so
        return most


def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console, disable=not enabled)
