"""The traced producer against librdkafka's mock cluster: a traced record's publish span ends with the partition and
offset the broker gave it, an untraced record is sent without one, and a closed producer leaves no span open; in
exactly-once delivery the span ends at the append, and the report waits for the transaction's commit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from confluent_kafka import KafkaError
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from bridge.core.records import KafkaRecord, OutboxRow, build_record
from bridge.kafka.traced_publisher import TracedPublisher, TracedTransactionalPublisher
from bridge.kafka.transaction_policy import TransactionPolicy
from bridge.kafka.transactional import COMMITTED
from bridge.tracing.spans import PublishSpans

pytestmark = pytest.mark.unit

MOCK = {"bootstrap.servers": "", "test.mock.num.brokers": 1, "log_level": 3, "linger.ms": 0}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

Reports = list[tuple[int, int, KafkaError | None]]


def _record(seq: int, traced: bool) -> KafkaRecord:
    row = OutboxRow(seq=seq, event_id=f"ev-{seq}", aggregate_type="order", aggregate_id="o-1",
                    event_type="OrderPlaced", payload="{}",
                    headers=f'{{"traceparent": "{TRACEPARENT}"}}' if traced else None,
                    occurred_at=datetime(2025, 1, 1, tzinfo=UTC), schema_version=1)
    return build_record(row, lambda aggregate_type: f"traced.{aggregate_type}")


@pytest.fixture()
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture()
def reports() -> Reports:
    return []


@pytest.fixture()
def publisher(exported: InMemorySpanExporter, reports: Reports) -> Iterator[TracedPublisher]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    publisher = TracedPublisher(PublishSpans(provider.get_tracer("test")), MOCK,
                                lambda seq, generation, err: reports.append((seq, generation, err)))
    yield publisher
    publisher.close(0)


def test_a_traced_record_is_published_in_a_span_ended_with_its_partition_and_offset(
    publisher: TracedPublisher, exported: InMemorySpanExporter, reports: Reports
) -> None:
    publisher.send(_record(1, traced=True), 0)
    publisher.send(_record(2, traced=False), 0)
    publisher.send(_record(3, traced=True), 0)
    assert publisher.flush(10) == 0

    assert sorted(seq for seq, _, err in reports if err is None) == [1, 2, 3], "every record acknowledged"
    spans = sorted(exported.get_finished_spans(), key=lambda span: (span.attributes or {})["outbox.seq"])
    assert [(span.attributes or {})["outbox.seq"] for span in spans] == [1, 3], "a span only for traced rows"
    offsets = [(span.attributes or {})["messaging.kafka.offset"] for span in spans]
    assert offsets == [0, 2], "the offsets the broker gave (one key, so one partition, seq 2 in between)"
    partitions = {(span.attributes or {})["messaging.destination.partition.id"] for span in spans}
    assert len(partitions) == 1 and str(partitions.pop()).isdigit()
    assert all(span.status.status_code is StatusCode.UNSET for span in spans)


def test_a_span_without_a_delivery_report_is_ended_as_abandoned_when_the_producer_closes(
    publisher: TracedPublisher, exported: InMemorySpanExporter
) -> None:
    started = publisher._spans.start(_record(5, traced=True))
    assert started is not None
    publisher._open[5] = started[1]  # as if produce() had refused it before queueing (no report follows)
    publisher.close(0)
    [span] = exported.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR and (span.attributes or {})["error.type"] == "abandoned"


def test_in_exactly_once_a_traced_record_is_published_in_a_span_and_reported_once_its_transaction_committed(
    exported: InMemorySpanExporter, reports: Reports
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    outcomes: list[str] = []
    settings = {**MOCK, "enable.idempotence": True, "acks": "all", "max.in.flight.requests.per.connection": 5,
                "enable.sparse.connections": False}
    policy = TransactionPolicy("outbox-bridge-traced", 1000, 60.0, "outbox.progress.traced", b"traced")
    publisher = TracedTransactionalPublisher(PublishSpans(provider.get_tracer("test")), settings,
                                             lambda seq, generation, err: reports.append((seq, generation, err)),
                                             policy=policy, on_transaction=outcomes.append)
    try:
        assert publisher.failure is None, "init_transactions passed"
        publisher.send(_record(1, traced=True), 0)
        publisher.send(_record(2, traced=False), 0)
        deadline = time.monotonic() + 10
        while len(exported.get_finished_spans()) < 1 and time.monotonic() < deadline:
            publisher.poll(0.05)
        assert reports == [], "appended, its transaction open: not reported yet"
        [span] = exported.get_finished_spans()
        assert (span.attributes or {})["outbox.seq"] == 1 and span.status.status_code is StatusCode.UNSET
        assert publisher.flush(10) == 0
        assert sorted(seq for seq, _, err in reports if err is None) == [1, 2] and outcomes == [COMMITTED]
    finally:
        publisher.close(0)
