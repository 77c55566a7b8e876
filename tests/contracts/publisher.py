"""The publisher contract: what the daemon relies on from every `Publisher`.

- every record sent is reported once through the delivery callback, with its seq and the generation it was
  sent with; a key's reports come in send order, and so do its records in the topic;
- `poll` serves reports, and returns a positive count whenever it served any (librdkafka counts a batch of
  reports as one, and its own events, logs and errors, too: the count is not a number of records, and it
  may be positive when no report came);
- `flush` returns once everything sent is reported, with 0 left;
- `close` finishes the publisher within its timeout, and by then every record sent has been reported once,
  delivered or with an error; nothing is reported afterwards, and an error reported sets `failure`;
- a record the broker refuses (one over its topic's max.message.bytes) is reported with the broker's error,
  and `failure` is set, so the daemon discards the producer.

Subclass `PublisherContract` per implementation and give it the fixtures `new_publisher` (a factory taking the
delivery callback), `topic` (a fresh topic of three partitions), `refusing_topic` (a fresh topic whose
max.message.bytes is `SMALL_TOPIC_LIMIT`) and `landed` (a topic's records as (key, seq) in log order, one
partition after another).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError

from bridge.core.records import KafkaRecord
from bridge.kafka.publisher import DeliveryCallback, Publisher

#: The max.message.bytes of `refusing_topic`: records of a few dozen bytes fit, `_oversized` does not.
SMALL_TOPIC_LIMIT = 1024
KEYS = (b"order-1", b"order-2", b"order-3")
GENERATION = 7
FLUSH_S = 30.0

NewPublisher = Callable[[DeliveryCallback], Publisher]
Landed = Callable[[str], list[tuple[bytes, int]]]


class Reports:
    """The (seq, generation, error) of every delivery report, in the order they came."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, KafkaError | None]] = []

    def __call__(self, seq: int, generation: int, err: KafkaError | None) -> None:
        self.seen.append((seq, generation, err))

    def seqs(self) -> list[int]:
        return [seq for seq, _, _ in self.seen]


def record(seq: int, topic: str, key: bytes | None = None, value: bytes = b"{}") -> KafkaRecord:
    """A record as the daemon builds one: keyed, with its event_id and seq in headers."""
    headers = [("event_id", f"e-{seq}".encode()), ("seq", str(seq).encode())]
    return KafkaRecord.of(seq, topic, key or KEYS[seq % len(KEYS)], value, headers)


def _oversized(seq: int, topic: str) -> KafkaRecord:
    # Random text: the producer compresses batches, and a repeated letter would shrink below the limit.
    return record(seq, topic, value=b'{"blob": "' + secrets.token_hex(4 * SMALL_TOPIC_LIMIT).encode() + b'"}')


def _by_key(pairs: list[tuple[bytes, int]]) -> dict[bytes, list[int]]:
    by_key: dict[bytes, list[int]] = {}
    for key, seq in pairs:
        by_key.setdefault(key, []).append(seq)
    return by_key


class PublisherContract:
    """Runs against the publisher a subclass's `new_publisher` fixture builds."""

    @pytest.fixture()
    def new_publisher(self) -> NewPublisher:
        raise NotImplementedError("an implementation's subclass builds its publisher")

    @pytest.fixture()
    def topic(self) -> str:
        raise NotImplementedError("an implementation's subclass makes a fresh topic of three partitions")

    @pytest.fixture()
    def refusing_topic(self) -> str:
        raise NotImplementedError("an implementation's subclass makes a topic limited to SMALL_TOPIC_LIMIT bytes")

    @pytest.fixture()
    def landed(self) -> Landed:
        raise NotImplementedError("an implementation's subclass reads a topic's records back")

    def test_every_record_sent_is_reported_once_with_its_seq_and_generation(
        self, new_publisher: NewPublisher, topic: str
    ) -> None:
        reports = Reports()
        publisher = new_publisher(reports)
        for seq in range(1, 31):
            publisher.send(record(seq, topic), GENERATION)
        assert publisher.flush(FLUSH_S) == 0
        assert sorted(reports.seen, key=lambda report: report[0]) == [(seq, GENERATION, None) for seq in range(1, 31)]
        assert publisher.failure is None

    def test_a_key_is_reported_and_lands_in_the_order_it_was_sent(
        self, new_publisher: NewPublisher, topic: str, landed: Landed
    ) -> None:
        reports = Reports()
        publisher = new_publisher(reports)
        sent = [(KEYS[(seq * 7) % len(KEYS)], seq) for seq in range(1, 61)]
        for key, seq in sent:
            publisher.send(record(seq, topic, key), GENERATION)
            if seq % 20 == 0:
                publisher.poll(0)
        assert publisher.flush(FLUSH_S) == 0
        key_of = dict((seq, key) for key, seq in sent)
        expected = _by_key(sent)
        assert _by_key([(key_of[seq], seq) for seq in reports.seqs()]) == expected, "reports in send order per key"
        assert _by_key(landed(topic)) == expected, "the log holds each key's records in send order"

    def test_poll_serves_reports_and_counts_them(self, new_publisher: NewPublisher, topic: str) -> None:
        reports = Reports()
        publisher = new_publisher(reports)
        for seq in range(1, 11):
            publisher.send(record(seq, topic), GENERATION)
        deadline = time.monotonic() + FLUSH_S
        while len(reports.seen) < 10 and time.monotonic() < deadline:
            before = len(reports.seen)
            served = publisher.poll(0.1)
            after = len(reports.seen)
            assert after == before or served > 0, f"poll served {after - before} reports and returned {served}"
        assert sorted(reports.seqs()) == list(range(1, 11)), "poll alone serves every report"

    def test_flush_returns_once_everything_sent_is_reported(self, new_publisher: NewPublisher, topic: str) -> None:
        reports = Reports()
        publisher = new_publisher(reports)
        assert publisher.flush(FLUSH_S) == 0, "nothing sent, nothing left"
        for seq in range(1, 21):
            publisher.send(record(seq, topic), GENERATION)
        assert publisher.flush(FLUSH_S) == 0
        assert sorted(reports.seqs()) == list(range(1, 21)), "every report was served by flush itself"

    def test_close_reports_every_record_once_within_its_timeout_and_nothing_after(
        self, new_publisher: NewPublisher, topic: str
    ) -> None:
        reports = Reports()
        publisher = new_publisher(reports)
        publisher.send(record(1, topic), GENERATION)  # delivered before the close
        assert publisher.flush(FLUSH_S) == 0
        for seq in range(2, 41):
            publisher.send(record(seq, topic), GENERATION)
        started = time.monotonic()
        publisher.close(2.0)
        assert time.monotonic() - started < 2.0 + 1.5, "close is bounded by its timeout (and a short last serve)"
        assert sorted(reports.seqs()) == list(range(1, 41)), "each record reported exactly once"
        assert all(generation == GENERATION for _, generation, _ in reports.seen)
        if any(err is not None for _, _, err in reports.seen):
            assert publisher.failure is not None, "a record reported with an error sets failure"
        count = len(reports.seen)
        time.sleep(0.2)
        assert len(reports.seen) == count, "nothing is reported after close"
        publisher.close(2.0)  # a second close does nothing
        assert len(reports.seen) == count

    def test_a_record_the_broker_refuses_is_reported_with_its_error_and_sets_failure(
        self, new_publisher: NewPublisher, refusing_topic: str
    ) -> None:
        reports = Reports()
        publisher = new_publisher(reports)
        publisher.send(record(1, refusing_topic), GENERATION)
        assert publisher.flush(FLUSH_S) == 0
        assert reports.seen == [(1, GENERATION, None)] and publisher.failure is None, "a small record fits"

        publisher.send(_oversized(2, refusing_topic), GENERATION)
        assert publisher.flush(FLUSH_S) == 0
        assert [(seq, generation) for seq, generation, _ in reports.seen] == [(1, GENERATION), (2, GENERATION)]
        refused = reports.seen[1][2]
        assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE, refused
        failure = publisher.failure
        assert failure is not None, "the daemon must learn that this producer is to be discarded"
        publisher.close(0)
