"""The exactly-once publisher: a transactional producer that reports a delivery only once Kafka committed it.

Its `transactional.id` is the same for every instance of a bridge name, so the producer of a new leader
(`init_transactions`) fences the previous leader's: whatever that one still had queued or in flight is aborted
by the broker and never reaches a `read_committed` consumer. A transaction begins with the first record sent
and is committed from `poll` once it is old or large enough (`TransactionPolicy`), and by `flush` and `close`;
with it goes a progress record, the last seq it covers, to the bridge's compacted progress topic
(`bridge.kafka.progress`), which a restart resumes after.

The delivery reports of an open transaction are held back and handed to the daemon only when its commit
succeeded: the ack tracker, the watermark and everything persisted from them never run ahead of what Kafka
committed. A commit that fails (aborted, timed out, fenced) reports the held records as failed, so the daemon
discards the producer and rewinds to the watermark (or, fenced, stands down: `is_fenced`) as after any failed
delivery. Meets the `Publisher` contract (tests/contracts/publisher.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final, Protocol, runtime_checkable

from confluent_kafka import KafkaError, KafkaException, Message

from bridge.core.records import KafkaRecord
from bridge.kafka.progress import progress_value
from bridge.kafka.publisher import CLOSE_TIMEOUT_S, DeliveryCallback, DeliveryFailure, KafkaPublisher, unconfirmed
from bridge.kafka.transaction_policy import TransactionPolicy

log = logging.getLogger("bridge.kafka.publisher")

#: The errors that mean another producer with this transactional.id took over: this one can never commit again.
FENCED_CODES: Final = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                                 KafkaError.TRANSACTION_COORDINATOR_FENCED})


@runtime_checkable
class ProgressMarking(Protocol):
    """A publisher that can lower Kafka's progress record on purpose (a rewind): the exactly-once ones."""

    def mark_progress(self, seq: int) -> bool: ...


#: The outcomes a transaction is reported with (`on_transaction`, the metric outbox_transactions_total).
COMMITTED: Final = "committed"
ABORTED: Final = "aborted"


def _ignore(_outcome: str) -> None:
    pass


def is_fenced(failure: DeliveryFailure | None) -> bool:
    """Whether a producer failed because a newer one with its transactional.id fenced it (a new leader)."""
    return failure is not None and failure.code in FENCED_CODES


def aborted(why: str) -> KafkaError:
    """The error a record of a transaction that was not committed is reported with: sent again by the daemon."""
    return KafkaError(KafkaError._PURGE_INFLIGHT, f"transaction not committed ({why}); the record is sent again")


class TransactionalPublisher(KafkaPublisher):
    """One transactional producer; like `KafkaPublisher`, build a new one after `failure` is set."""

    def __init__(self, settings: dict[str, Any], on_delivery: DeliveryCallback, policy: TransactionPolicy,
                 on_transaction: Callable[[str], None] = _ignore) -> None:
        transactional = {
            **settings,
            "transactional.id": policy.transactional_id,
            # librdkafka refuses a delivery timeout above the transaction timeout; the broker aborts a
            # transaction left open longer than this, so the two are one.
            "transaction.timeout.ms": settings.get("delivery.timeout.ms", 60_000),
        }
        super().__init__(transactional, on_delivery)
        self._policy = policy
        self._on_transaction = on_transaction  # told COMMITTED or ABORTED as each transaction ends
        self._held: list[tuple[int, int]] = []  # (seq, generation) acknowledged in the open transaction
        self._began: float | None = None  # when the open transaction began; None while none is open
        self._events = 0
        self._last_seq = 0
        self._last_event_id: str | None = None
        try:
            # Fences every earlier producer of this transactional.id, and waits for its open transaction to end.
            self._producer.init_transactions(policy.init_timeout_s)
        except KafkaException as exc:
            self._failed(exc, "init_transactions")

    # ------------------------------------------------------------------------------------- sending

    def send(self, record: KafkaRecord, generation: int) -> None:
        if self._began is not None and self._events >= self._policy.max_events and self.failure is None:
            # Full: committed before this record opens the next one, so no transaction outgrows max_events.
            self._commit(self._policy.init_timeout_s)
        if self._began is None:
            try:
                self._producer.begin_transaction()
            except KafkaException as exc:
                err = self._failed(exc, "begin_transaction")
                self._on_delivery(record.seq, generation, err)
                return
            self._began = time.monotonic()
        self._events += 1
        if record.seq > self._last_seq:
            self._last_seq = record.seq
            self._last_event_id = next((v.decode() for k, v in record.headers if k == "event_id"), None)
        super().send(record, generation)

    def _delivered(self, seq: int, generation: int, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            offset = msg.offset()
            if offset is not None and offset >= 0:
                # Appended, not yet committed: reported once the transaction is (`_commit`).
                self._held.append((seq, generation))
                return
            err = unconfirmed(seq)
        super()._delivered(seq, generation, err, msg)

    def _progress_delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None and self.failure is None:
            self.failure = DeliveryFailure(None, err.code(), f"progress record: {err.str()}", fatal=err.fatal())

    # ------------------------------------------------------------------------------------ committing

    def _due(self) -> float | None:
        """Seconds until the open transaction is to be committed (0: now); None when none is open."""
        if self._began is None:
            return None
        if self._events >= self._policy.max_events:
            return 0.0
        return max(0.0, self._began + self._policy.interval_s - time.monotonic())

    def _commit(self, timeout: float) -> int:
        """Commit the open transaction with its progress record and release its held reports; on failure,
        abort it and report them failed. Returns how many reports were released."""
        try:
            self._producer.produce(self._policy.progress_topic, progress_value(self._last_seq, self._last_event_id),
                                   self._policy.progress_key, on_delivery=self._progress_delivered)
            self._producer.commit_transaction(max(timeout, 0.001))
        except KafkaException as exc:
            self._failed(exc, "commit_transaction")
        if self.failure is not None:
            self._abort(timeout, self.failure.reason)
            return 0
        held, self._held = self._held, []
        self._began = None
        self._events = 0
        self._on_transaction(COMMITTED)
        for seq, generation in held:
            self._on_delivery(seq, generation, None)
        return len(held)

    def _abort(self, timeout: float, why: str) -> None:
        """End the open transaction without committing it; its records are reported failed."""
        if self._began is not None:
            self._began = None
            self._events = 0
            self._on_transaction(ABORTED)
            if not is_fenced(self.failure):  # a fenced producer cannot abort, and need not: its successor did
                try:
                    self._producer.abort_transaction(max(timeout, 0.001))
                except KafkaException as exc:
                    self._failed(exc, "abort_transaction")
        self._report_held(why)

    def _report_held(self, why: str) -> None:
        """Report every held record failed: its transaction was not committed."""
        held, self._held = self._held, []
        if not held:
            return
        err = aborted(why)
        if self.failure is None:
            self.failure = DeliveryFailure(held[0][0], err.code(), err.str(), fatal=False)
        for seq, generation in held:
            self._on_delivery(seq, generation, err)

    def _failed(self, exc: KafkaException, during: str) -> KafkaError:
        """Record a failed transactional call as `failure` (the first one counts) and return its error."""
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else KafkaError(
            KafkaError._FAIL, str(exc))
        if self.failure is None or (err.fatal() and not self.failure.fatal):
            self.failure = DeliveryFailure(None, err.code(), f"{during}: {err.str()}", fatal=err.fatal())
        # A warning: the term decides what it means (a rebuild, a refusal, a fence) and logs that as the error.
        log.warning("transaction failed", extra={"during": during, "error": err.str(), "code": err.name()})
        return err

    def mark_progress(self, seq: int) -> bool:
        """Commit a transaction holding only a progress record at `seq`, before a rewind to `seq` is stored: a
        restart then resumes after `seq` even if it comes before anything re-sent is committed. False (and
        `failure` set) when it could not; call it with no transaction open (a new producer)."""
        assert self._began is None, "a progress mark is a transaction of its own"
        timeout = self._policy.init_timeout_s
        try:
            self._producer.begin_transaction()
            self._producer.produce(self._policy.progress_topic, progress_value(seq), self._policy.progress_key,
                                   on_delivery=self._progress_delivered)
            self._producer.commit_transaction(timeout)
        except KafkaException as exc:
            self._failed(exc, "commit_transaction (progress mark)")
        if self.failure is not None:
            self._on_transaction(ABORTED)
            if not is_fenced(self.failure):
                try:
                    self._producer.abort_transaction(timeout)
                except KafkaException as exc:
                    self._failed(exc, "abort_transaction")
            return False
        self._on_transaction(COMMITTED)
        return True

    # --------------------------------------------------------------------------- the Publisher calls

    def poll(self, timeout: float) -> int:
        due = self._due()
        served = self._serve(self._producer.poll, timeout if due is None else min(timeout, due))
        # After a failure the transaction stays open until `close` aborts it: the daemon closes a failed producer.
        if self.failure is None and self._due() == 0.0:
            served += self._commit(self._policy.init_timeout_s)
        return served

    def send_queued(self, timeout: float) -> int:
        # Records of a transaction are seen when it commits, on the policy's clock (`poll`), not when they are sent.
        return self.poll(timeout)

    def flush(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for everything sent, and commit it; return how many records are still
        unreported."""
        deadline = time.monotonic() + timeout
        super().flush(timeout)
        if self.failure is None and self._began is not None:
            self._commit(deadline - time.monotonic())
        elif self.failure is not None:
            self._abort(deadline - time.monotonic(), self.failure.reason)
        return len(self._producer) + len(self._held)

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Commit what is open (unless `failure` is set or there is no time), else abort it, then finish the
        producer for good as `KafkaPublisher.close` does."""
        if self._closed:
            return
        deadline = time.monotonic() + timeout
        if self._began is not None:
            if self.failure is None and timeout > 0:
                super().flush(timeout)
                if self.failure is None:
                    self._commit(deadline - time.monotonic())
            self._abort(deadline - time.monotonic(), "closed before it was committed"
                        if self.failure is None else self.failure.reason)
        super().close(max(0.0, deadline - time.monotonic()))
        # Records answered while the producer closed were never part of a committed transaction.
        self._report_held("closed")
