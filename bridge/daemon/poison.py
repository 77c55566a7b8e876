"""From a row to the record the bridge sends, under the poison policy.

A row becomes its record in the configured format (`bridge.core.records.build_record`, or
`bridge.core.cloudevents.build_cloudevent`; with `BRIDGE_VALUE_FORMAT=json-schema` its value then validated and
framed by `bridge.schemas.values`) with each topic checked, or created, the first time it is used. A row that
can never be published as it is (too large, unroutable, refused by Kafka alone, failing its schema) is poison:
under `halt` the gate raises `PoisonEventError` naming it, under `dead-letter` it returns the record for the
dead-letter topic instead. The gate decides; the loop sends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from bridge.config import PoisonPolicy, RecordFormat, TopicSection
from bridge.core.cloudevents import build_cloudevent
from bridge.core.records import (
    DEFAULT_MAX_MESSAGE_BYTES,
    KafkaRecord,
    OutboxRow,
    TopicRouter,
    build_record,
    dead_letter_record,
    payload_complete,
    record_and_payload,
)
from bridge.core.refusals import Refusals
from bridge.core.wire_format import PREFIX_BYTES
from bridge.errors import PoisonEventError
from bridge.kafka.topics import TopicChecker
from bridge.metrics import BridgeMetrics
from bridge.schemas.values import SchemaValues
from bridge.store.dead_letters import DeadLetter

log = logging.getLogger("bridge.daemon")

#: librdkafka's default `message.max.bytes`: the producer refuses a larger record before sending it.
PRODUCER_MAX_MESSAGE_BYTES = 1_000_000


class PoisonGate:
    """Builds each row's record, checks topics once, and applies the poison policy."""

    def __init__(self, topics: TopicSection, policy: PoisonPolicy, guard: TopicChecker, metrics: BridgeMetrics,
                 refusals: Refusals, producer_limit: int = PRODUCER_MAX_MESSAGE_BYTES,
                 on_dead_letter: Callable[[DeadLetter], None] = lambda _letter: None, outbox: str = "",
                 values: SchemaValues | None = None) -> None:
        self._topics = topics
        self._on_dead_letter = on_dead_letter
        self._outbox = outbox
        self._policy = policy
        self._guard = guard
        self._metrics = metrics
        self._refusals = refusals
        self._route = TopicRouter(topics.topic_for)
        self._checked_topics: dict[str, int] = {}
        # The producer refuses larger records before sending them (its `message.max.bytes`).
        self._producer_limit = producer_limit
        #: The configured format's builder: the compiled `build_record` itself in the plain one; with json-schema
        #: values, each value validated and framed.
        self._build = record_builder(topics, values)

    def record_for(self, row: OutboxRow) -> KafkaRecord:
        """The record for a row, the dead-letter record, or PoisonEventError (policy `halt`)."""
        try:
            refused = self._refusals.culprit(row.seq)
            if refused is not None:
                raise PoisonEventError(row.seq, f"Kafka refused the record: {refused}")
            try:
                topic = self._route(row.aggregate_type)
            except ValueError:
                limit = self._producer_limit  # unroutable: build_record says so
            else:
                limit = min(self._topic_limit(topic), self._producer_limit)
            return self._build(row, self._route, limit)
        except PoisonEventError as exc:
            self._metrics.poison_events.labels(policy=self._policy.value).inc()
            if self._policy is PoisonPolicy.HALT:
                raise
            topic = self._topics.dlq_topic_name
            log.error("poison event sent to the dead-letter topic",
                      extra={"seq": row.seq, "reason": exc.reason, "topic": topic})
            limit = min(self._topic_limit(topic), self._producer_limit)
            record = dead_letter_record(row, exc.reason, topic, self._topics.bridge_name, limit, self._outbox)
            self._on_dead_letter(DeadLetter(row.seq, row.event_id, row.aggregate_type, row.aggregate_id, exc.reason,
                                            topic, len(row.payload.encode()), not payload_complete(record)))
            return record

    def recheck(self, topic: str) -> None:
        """Check `topic` again before its next record: its limits may have changed since."""
        self._checked_topics.pop(topic, None)

    def _topic_limit(self, topic: str) -> int:
        """Check (or create) a topic the first time it is used; return its max.message.bytes."""
        known = self._checked_topics.get(topic)
        if known is not None:
            return known
        report = self._guard.ensure(topic, self._topics.allow_create)
        limit = report.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
        self._checked_topics[topic] = limit
        return limit


def record_builder(topics: TopicSection, values: SchemaValues | None = None,
                   ) -> Callable[[OutboxRow, Callable[[str], str], int], KafkaRecord]:
    """`build_record`, `build_cloudevent` with the configured source, or framed values: the gate's, and a range
    replay's."""
    if values is not None:
        framing = values

        def framed(row: OutboxRow, route: Callable[[str], str], limit: int) -> KafkaRecord:
            return framing.framed(row, *record_and_payload(row, route, limit - PREFIX_BYTES))

        return framed
    if topics.record_format is not RecordFormat.CLOUDEVENTS:
        return build_record
    source = topics.cloudevents_source.encode()

    def cloudevent(row: OutboxRow, route: Callable[[str], str], limit: int) -> KafkaRecord:
        return build_cloudevent(row, route, source, limit)

    return cloudevent


def producer_limit(extra: Mapping[str, object]) -> int:
    """The producer's `message.max.bytes`: set among the extras, or librdkafka's default."""
    value = extra.get("message.max.bytes")
    return int(str(value)) if value is not None else PRODUCER_MAX_MESSAGE_BYTES
