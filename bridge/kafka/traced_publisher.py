"""`KafkaPublisher` with the bridge's publish spans (`bridge.tracing.spans`): the producer the bridge uses when
tracing is on, and `TracedTransactionalPublisher` in exactly-once delivery. Without tracing the bridge uses the
untraced publishers themselves, so its per-event path has no span code.

In exactly-once delivery a publish span ends when the broker appended its record, as in at-least-once: the
record's transaction commits after (or aborts, and the record is sent again in a span of its own), which
`outbox_transactions_total` counts.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, Message
from opentelemetry.trace import Span

from bridge.core.records import KafkaRecord
from bridge.kafka.publisher import CLOSE_TIMEOUT_S, DeliveryCallback, KafkaPublisher, unconfirmed
from bridge.kafka.transactional import TransactionalPublisher
from bridge.tracing.spans import PublishSpans


class TracedPublisher(KafkaPublisher):
    """A `KafkaPublisher` that sends each traced record in a publish span, ended by its delivery report."""

    def __init__(self, spans: PublishSpans, settings: dict[str, Any], on_delivery: DeliveryCallback,
                 **more: Any) -> None:
        self._spans = spans
        self._open: dict[int, Span] = {}  # by seq: the spans of records not yet answered
        super().__init__(settings, on_delivery, **more)  # `more`: the transactional publisher's settings

    def send(self, record: KafkaRecord, generation: int) -> None:
        started = self._spans.start(record)
        if started is not None:
            record, span = started
            earlier = self._open.pop(record.seq, None)
            if earlier is not None:
                self._spans.abandoned(earlier, "sent again before the broker answered")
            self._open[record.seq] = span
        super().send(record, generation)

    def _delivered(self, seq: int, generation: int, err: KafkaError | None, msg: Message) -> None:
        span = self._open.pop(seq, None) if self._open else None
        if span is not None:
            offset = msg.offset() if err is None else None
            if offset is not None and offset >= 0:
                self._spans.acknowledged(span, msg.partition() or 0, offset)
            else:
                self._spans.failed(span, err if err is not None else unconfirmed(seq))
        super()._delivered(seq, generation, err, msg)

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        super().close(timeout)
        # Every report has been served; a span still open is that of a record refused before it was queued.
        for span in self._open.values():
            self._spans.abandoned(span, "no delivery report: the record was refused before it was queued")
        self._open.clear()


class TracedTransactionalPublisher(TracedPublisher, TransactionalPublisher):
    """The exactly-once publisher with publish spans: `TracedPublisher(spans, settings, on_delivery, policy=...,
    on_transaction=...)` over `TransactionalPublisher`."""
