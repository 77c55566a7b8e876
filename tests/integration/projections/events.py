"""Producing outbox-shaped Kafka records for the projection tests, as the bridge writes them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Producer

BASE_TIME = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class OutboxEvent:
    """One outbox row as the bridge publishes it."""

    seq: int
    aggregate_id: str
    event_type: str
    payload: dict[str, Any] | str
    aggregate_type: str = "order"
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    occurred_at: datetime | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # Replace (or, with None, leave out) standard headers, to make malformed records.
    header_overrides: dict[str, str | None] = field(default_factory=dict)

    def value(self) -> bytes:
        return (self.payload if isinstance(self.payload, str) else json.dumps(self.payload)).encode()

    def kafka_headers(self) -> list[tuple[str, bytes]]:
        occurred = self.occurred_at or BASE_TIME + timedelta(seconds=self.seq)
        standard = [
            ("event_id", self.event_id.encode()),
            ("event_type", self.event_type.encode()),
            ("aggregate_type", self.aggregate_type.encode()),
            ("seq", str(self.seq).encode()),
            ("occurred_at", occurred.isoformat().encode()),
        ]
        standard = [
            (k, (self.header_overrides[k] or "").encode()) if k in self.header_overrides else (k, v)
            for k, v in standard
            if not (k in self.header_overrides and self.header_overrides[k] is None)
        ]
        return standard + [(k, v.encode()) for k, v in self.headers.items()]


def produce(
    bootstrap: str, topic: str, events: Iterable[OutboxEvent], copies: int = 1, timestamp_ms: int | None = None
) -> int:
    """Send each event `copies` times (a replaying bridge), in order; return the records sent.

    `timestamp_ms` sets every record's Kafka timestamp (default: the time it is produced)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
        }
    )
    sent = 0
    batch = list(events)
    for _ in range(copies):
        for event in batch:
            producer.produce(
                topic,
                key=event.aggregate_id.encode(),
                value=event.value(),
                headers=event.kafka_headers(),
                timestamp=timestamp_ms or 0,
            )
            sent += 1
            producer.poll(0)
    assert producer.flush(30) == 0
    return sent


def order_lifecycle(orders: int, start_seq: int = 1) -> list[OutboxEvent]:
    """A deterministic mix of placed, paid, shipped and cancelled orders, in seq order."""
    events: list[OutboxEvent] = []
    seq = start_seq
    for n in range(orders):
        order_id = f"order-{n:03d}"
        steps: Sequence[tuple[str, dict[str, Any]]] = [
            (
                "OrderPlaced",
                {"order_id": order_id, "customer": f"c-{n % 7}", "amount": 10 + n, "currency": "EUR"},
            ),
            ("OrderPaid", {"order_id": order_id, "amount": 10 + n}),
        ]
        if n % 5 == 4:
            steps = [*steps, ("OrderCancelled", {"order_id": order_id, "reason": "customer"})]
        elif n % 2 == 0:
            steps = [*steps, ("OrderShipped", {"order_id": order_id, "carrier": "dhl" if n % 4 else "ups"})]
        for event_type, payload in steps:
            events.append(
                OutboxEvent(
                    seq=seq,
                    aggregate_id=order_id,
                    event_type=event_type,
                    payload=payload,
                    event_id=f"evt-{seq:05d}",
                )
            )
            seq += 1
    return events


def as_micro_batch(spark: Any, events: Iterable[OutboxEvent], topic: str = "outbox.event.order") -> Any:
    """The events as a DataFrame shaped like a micro-batch of the Kafka source, without a broker.

    For tests that hand batches to `BatchApplier.apply` one by one; offsets count up from 0 in one partition.
    """
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField(
                "headers",
                ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
            ),
        ]
    )
    rows = [
        (
            bytearray(e.aggregate_id.encode()),
            bytearray(e.value()),
            topic,
            0,
            offset,
            BASE_TIME,
            0,
            [(k, bytearray(v)) for k, v in e.kafka_headers()],
        )
        for offset, e in enumerate(events)
    ]
    return spark.createDataFrame(rows, schema)
