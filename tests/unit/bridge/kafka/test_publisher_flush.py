"""`flush` serves every delivery report even when a fatal error comes among them: with the gapless guarantee a
batch that cannot be appended is a fatal error, raised while its records' reports are still to be served.
librdkafka's in-process mock cluster stands in for Kafka, its round trip slowed so that sends stay in flight."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError

from bridge.config import BridgeConfig
from bridge.core.records import KafkaRecord
from bridge.kafka.producer_settings import producer_settings
from bridge.kafka.publisher import KafkaPublisher

MOCK = {"test.mock.num.brokers": 1, "test.mock.broker.rtt": 200, "log_level": 3}


def _record(seq: int) -> KafkaRecord:
    return KafkaRecord.of(seq, "u.order", f"order-{seq % 3}".encode(), b"{}", [("seq", str(seq).encode())])


def test_flush_serves_every_report_when_a_fatal_error_comes_among_them() -> None:
    seen: list[tuple[int, Any]] = []
    publisher = KafkaPublisher({**producer_settings(BridgeConfig().producer).conf, **MOCK},
                               lambda seq, _generation, err: seen.append((seq, err)))
    publisher.send(_record(0), 0)  # warm up: connection, metadata, producer id
    assert publisher.flush(30) == 0 and seen == [(0, None)]
    seen.clear()
    for seq in range(1, 7):
        publisher.send(_record(seq), 0)
    publisher.poll(0.05)  # sent, and the answers are still a round trip away
    # A request given up on while in flight leaves a gap in the partition's sequence: a fatal error.
    publisher._producer.purge(in_queue=True, in_flight=True)

    assert publisher.flush(5) == 0
    assert sorted(seq for seq, _ in seen) == list(range(1, 7)), "each reported once, none lost to the error"
    assert all(err is not None and err.code() == KafkaError._PURGE_INFLIGHT for _, err in seen)
    assert publisher.failure is not None and publisher.failure.fatal
    publisher.close(0)
