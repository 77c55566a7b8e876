"""`TransactionalPublisher` on librdkafka's in-process mock cluster (which runs transactions): the reports of an
open transaction are held until it commits, it commits by age, by size, on flush and on close, and a transaction
that is not committed reports its records failed. tests/integration/bridge/test_publisher_contract.py runs the
publisher contract on it against a real broker, with fencing and the progress topic."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

from bridge.config import load_config
from bridge.core.records import KafkaRecord
from bridge.kafka.publisher import DeliveryFailure
from bridge.kafka.transaction_policy import TransactionPolicy
from bridge.kafka.transactional import ABORTED, COMMITTED, TransactionalPublisher, aborted, is_fenced

pytestmark = pytest.mark.unit

MOCK = {"test.mock.num.brokers": 1, "log_level": 3, "enable.sparse.connections": False}
TOPIC = "u.order"


class Reports:
    def __init__(self) -> None:
        self.seen: list[tuple[int, int, KafkaError | None]] = []

    def __call__(self, seq: int, generation: int, err: KafkaError | None) -> None:
        self.seen.append((seq, generation, err))


def _settings() -> dict[str, Any]:
    config = load_config(flags={"delivery": "exactly-once", "allow_single_broker": True, "replication_factor": 1},
                         env={})
    return {**config.producer.as_librdkafka_dict(), **MOCK}


def _policy(max_events: int = 1000, interval_s: float = 60.0) -> TransactionPolicy:
    return TransactionPolicy("outbox-bridge-unit", max_events, interval_s, "outbox.progress.unit", b"unit",
                             init_timeout_s=10.0)


def _record(seq: int) -> KafkaRecord:
    return KafkaRecord.of(seq, TOPIC, f"order-{seq % 3}".encode(), b"{}", [("seq", str(seq).encode())])


def _poll_for(publisher: TransactionalPublisher, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        publisher.poll(0.02)


def test_reports_are_held_until_the_transaction_is_old_enough_then_released_together() -> None:
    reports = Reports()
    publisher = TransactionalPublisher(_settings(), reports, _policy(interval_s=0.6))
    assert publisher.failure is None, "init_transactions succeeded"
    started = time.monotonic()
    for seq in range(1, 6):
        publisher.send(_record(seq), 3)
    _poll_for(publisher, 0.3)
    assert reports.seen == [], "appended but not committed: nothing reported yet"
    while not reports.seen and time.monotonic() - started < 10:
        publisher.poll(0.05)
    assert time.monotonic() - started >= 0.6
    assert sorted(reports.seen, key=lambda report: report[0]) == [(seq, 3, None) for seq in range(1, 6)]
    publisher.close()


def test_a_transaction_that_reaches_max_events_commits_without_waiting_for_its_age() -> None:
    reports = Reports()
    publisher = TransactionalPublisher(_settings(), reports, _policy(max_events=4, interval_s=60.0))
    for seq in range(1, 5):
        publisher.send(_record(seq), 0)
    deadline = time.monotonic() + 10
    while len(reports.seen) < 4 and time.monotonic() < deadline:
        publisher.poll(0.05)
    assert sorted(seq for seq, _, err in reports.seen if err is None) == [1, 2, 3, 4]
    publisher.close()


def test_poll_waits_no_longer_than_until_the_open_transaction_is_due() -> None:
    reports = Reports()
    publisher = TransactionalPublisher(_settings(), reports, _policy(interval_s=0.2))
    publisher.send(_record(1), 0)
    started = time.monotonic()
    while not reports.seen and time.monotonic() - started < 5:
        publisher.poll(5.0)  # the daemon's idle wait: the commit must not wait for it
    assert reports.seen == [(1, 0, None)] and time.monotonic() - started < 1.5
    publisher.close()


def test_flush_commits_what_is_open_and_leaves_nothing_unreported() -> None:
    reports = Reports()
    publisher = TransactionalPublisher(_settings(), reports, _policy())
    for seq in range(1, 11):
        publisher.send(_record(seq), 0)
    assert publisher.flush(10) == 0
    assert sorted(seq for seq, _, _ in reports.seen) == list(range(1, 11))
    assert all(err is None for _, _, err in reports.seen)
    publisher.close()


def test_close_commits_an_open_transaction_when_nothing_failed() -> None:
    reports = Reports()
    publisher = TransactionalPublisher(_settings(), reports, _policy())
    for seq in range(1, 4):
        publisher.send(_record(seq), 0)
    publisher.close(5.0)
    assert sorted(reports.seen, key=lambda report: report[0]) == [(1, 0, None), (2, 0, None), (3, 0, None)]


def test_after_a_failure_close_aborts_and_reports_the_held_records_failed() -> None:
    reports = Reports()
    publisher = TransactionalPublisher(_settings(), reports, _policy())
    for seq in range(1, 4):
        publisher.send(_record(seq), 0)
    _poll_for(publisher, 0.3)  # appended, held
    assert reports.seen == []
    publisher.failure = DeliveryFailure(9, KafkaError.MSG_SIZE_TOO_LARGE, "another record was refused", fatal=False)
    publisher.close(5.0)
    assert sorted(seq for seq, _, _ in reports.seen) == [1, 2, 3], "each reported once"
    assert all(err is not None and err.code() == KafkaError._PURGE_INFLIGHT for _, _, err in reports.seen)


def test_close_without_time_to_commit_reports_the_open_transaction_failed() -> None:
    reports = Reports()
    publisher = TransactionalPublisher(_settings(), reports, _policy())
    publisher.send(_record(1), 0)
    _poll_for(publisher, 0.3)
    publisher.close(0)  # what a term does when it lost the lease: commit nothing more
    assert [(seq, err is not None) for seq, _, err in reports.seen] == [(1, True)]
    assert publisher.failure is not None


def test_fenced_failures_are_told_apart_from_the_others() -> None:
    fenced = [DeliveryFailure(None, code, "x", fatal=True)
              for code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)]
    assert all(is_fenced(failure) for failure in fenced)
    assert not is_fenced(DeliveryFailure(1, KafkaError.MSG_SIZE_TOO_LARGE, "x", fatal=False))
    assert not is_fenced(None)


def test_an_aborted_record_says_it_is_sent_again() -> None:
    err = aborted("commit_transaction: timed out")
    assert err.code() == KafkaError._PURGE_INFLIGHT and "sent again" in err.str() and "timed out" in err.str()


def test_the_producer_is_transactional_with_the_delivery_timeout_as_its_transaction_timeout() -> None:
    settings = _settings()
    publisher = TransactionalPublisher(settings, Reports(), _policy())
    assert publisher.failure is None
    publisher.close()
    assert settings["delivery.timeout.ms"] == 120_000  # the transaction timeout follows it (librdkafka checks)


def test_a_progress_mark_is_a_transaction_of_its_own_and_sending_goes_on_after_it() -> None:
    reports = Reports()
    publisher = TransactionalPublisher(_settings(), reports, _policy())
    assert publisher.mark_progress(4) and publisher.failure is None
    for seq in (5, 6):
        publisher.send(_record(seq), 1)
    assert publisher.flush(10) == 0
    assert sorted(reports.seen, key=lambda report: report[0]) == [(5, 1, None), (6, 1, None)]
    publisher.close()


def test_each_transaction_is_told_once_as_committed_or_aborted() -> None:
    outcomes: list[str] = []
    publisher = TransactionalPublisher(_settings(), Reports(), _policy(), on_transaction=outcomes.append)
    assert publisher.mark_progress(2)
    for seq in (3, 4):
        publisher.send(_record(seq), 0)
    assert publisher.flush(10) == 0
    publisher.send(_record(5), 0)
    _poll_for(publisher, 0.3)
    publisher.close(0)  # the lease lost: the open transaction is aborted
    assert outcomes == [COMMITTED, COMMITTED, ABORTED]
