"""A delivery librdkafka reports as a success without an offset is not an acknowledgement.

librdkafka takes a retried batch that the broker calls a duplicate for delivered and gives it no offset.
A broker accepts any first sequence from a producer it does not know yet, so when a new producer's first
request to a partition fails and the next succeeds, the first batch is never appended and is still
reported delivered. The bridge's clean-clone CI run lost four events that way on a partition created
30 ms after they were sent (`tests/integration/bridge/test_fresh_topic_delivery.py` searches for it on a
real broker). The publisher must count such a report as a failed delivery, so the daemon re-sends."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from bridge.kafka.publisher import KafkaPublisher

pytestmark = pytest.mark.unit

MOCK = {"bootstrap.servers": "", "test.mock.num.brokers": 1, "log_level": 3}


class _Delivered:
    """What librdkafka hands the delivery callback: only the offset matters here."""

    def __init__(self, offset: int | None) -> None:
        self._offset = offset

    def offset(self) -> int | None:
        return self._offset


@pytest.fixture()
def reports() -> list[tuple[int, int, KafkaError | None]]:
    return []


@pytest.fixture()
def publisher(reports: list[tuple[int, int, KafkaError | None]]) -> Any:
    publisher = KafkaPublisher(MOCK, lambda seq, generation, err: reports.append((seq, generation, err)))
    yield publisher
    publisher.close(0)


@pytest.mark.parametrize("offset", [None, -1001])
def test_a_success_without_an_offset_is_reported_as_a_failed_delivery_and_fails_the_producer(
    publisher: KafkaPublisher, reports: list[tuple[int, int, KafkaError | None]], offset: int | None
) -> None:
    publisher._delivered(9, 0, None, _Delivered(offset))  # type: ignore[arg-type]

    [(seq, generation, err)] = reports
    assert (seq, generation) == (9, 0)
    assert err is not None, "an unconfirmed delivery must not count as an acknowledgement"
    assert err.code() == KafkaError._INCONSISTENT and "seq 9" in err.str() and "without an offset" in err.str()
    assert publisher.failure is not None and publisher.failure.seq == 9 and not publisher.failure.fatal, (
        "the daemon rebuilds the producer and sends again from the watermark"
    )


def test_a_success_with_an_offset_is_an_acknowledgement(
    publisher: KafkaPublisher, reports: list[tuple[int, int, KafkaError | None]]
) -> None:
    publisher._delivered(9, 0, None, _Delivered(0))  # type: ignore[arg-type]
    publisher._delivered(10, 0, None, _Delivered(41))  # type: ignore[arg-type]

    assert reports == [(9, 0, None), (10, 0, None)]
    assert publisher.failure is None
