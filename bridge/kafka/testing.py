"""In-memory stand-ins for the Kafka side, for fast tests of the daemon without a broker.

`InMemoryPublisher` implements the `Publisher` interface: what is sent waits in a local queue, the broker
answers on the next `poll`, in send order, and each answer is reported through the same delivery callback
the real producer uses. It meets the same contract as `KafkaPublisher` (tests/contracts/publisher.py).
`InMemoryTransactionalPublisher` is the exactly-once one over an `InMemoryCoordinator`: it holds the reports of
its open transaction until it commits, and `delivered` is then what a `read_committed` consumer sees.
`AcceptingTopicGuard` accepts every topic with the broker's default size limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError

from bridge.core.records import KafkaRecord
from bridge.kafka.publisher import DeliveryFailure
from bridge.kafka.topics import TopicReport
from bridge.kafka.transactional import aborted, is_fenced

#: The broker's default max.message.bytes plus the record batch overhead, as a real topic reports it.
DEFAULT_TOPIC_MAX_MESSAGE_BYTES = 1_048_588

#: The broker's verdict on one record: None accepts it, an error refuses it.
Verdict = Callable[[KafkaRecord], KafkaError | None]


def over_limit(limits: Mapping[str, int]) -> Verdict:
    """A broker that refuses, as MSG_SIZE_TOO_LARGE, a record larger than its topic's max.message.bytes."""

    def verdict(record: KafkaRecord) -> KafkaError | None:
        limit = limits.get(record.topic)
        if limit is None or record.size <= limit:
            return None
        return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")

    return verdict


class InMemoryPublisher:
    """A producer over an in-memory broker: `sent` holds every record handed to it, `delivered` the ones
    the broker accepted, in delivery order.

    Everything sent to one topic between two polls is one batch, and the broker refuses a batch as a whole
    when `refuse` refuses any record in it, as Kafka refuses a record batch over max.message.bytes: each
    record of the batch is then reported with that error."""

    def __init__(self, on_delivery: Callable[[int, int, KafkaError | None], None],
                 delivered: list[KafkaRecord] | None = None, *, hold: bool = False,
                 refuse: Verdict | None = None) -> None:
        self.failure: DeliveryFailure | None = None
        self.sent: list[KafkaRecord] = []
        self.delivered: list[KafkaRecord] = [] if delivered is None else delivered
        #: While set, nothing is delivered: records stay queued (a broker that does not answer).
        self.hold = hold
        self._refuse = refuse
        self._on_delivery = on_delivery
        self._queued: list[tuple[KafkaRecord, int]] = []
        self.closed = False

    @property
    def queued(self) -> int:
        """Records sent and not yet delivered."""
        return len(self._queued)

    def send(self, record: KafkaRecord, generation: int) -> None:
        self.sent.append(record)
        self._queued.append((record, generation))

    def poll(self, timeout: float) -> int:
        """Let the broker answer everything queued; returns how many reports were served."""
        if self.hold or not self._queued:
            if timeout:
                time.sleep(min(timeout, 0.01))
            return 0
        queued, self._queued = self._queued, []
        refused = self._refused_batches(queued)
        for record, generation in queued:
            err = refused.get(record.topic)
            if err is None:
                self.delivered.append(record)
            self._report(record.seq, generation, err)
        return len(queued)

    def _refused_batches(self, queued: list[tuple[KafkaRecord, int]]) -> dict[str, KafkaError]:
        """The topics whose batch the broker refuses, with the error it refuses it with."""
        refused: dict[str, KafkaError] = {}
        if self._refuse is not None:
            for record, _ in queued:
                if record.topic not in refused:
                    err = self._refuse(record)
                    if err is not None:
                        refused[record.topic] = err
        return refused

    def _report(self, seq: int, generation: int, err: KafkaError | None) -> None:
        # The first failed delivery is the one the daemon acts on, as with `KafkaPublisher`.
        if err is not None and self.failure is None:
            self.failure = DeliveryFailure(seq, err.code(), err.str(), fatal=err.fatal())
        self._on_delivery(seq, generation, err)

    def send_queued(self, timeout: float) -> int:
        """Nothing lingers here: as `poll`, and returns how many records are still unanswered."""
        self.poll(timeout)
        return len(self._queued)

    def flush(self, timeout: float) -> int:
        """Serve every report the broker gives; returns how many records are still unanswered (while held)."""
        self.poll(timeout if self.hold else 0)
        return len(self._queued)

    def close(self, timeout: float = 0.0) -> None:
        """Finish for good: what is still queued was never answered, and is reported as purged."""
        if self.closed:
            return
        self.closed = True
        queued, self._queued = self._queued, []
        for record, generation in queued:
            self._report(record.seq, generation, KafkaError(KafkaError._PURGE_QUEUE, "Local: Purged in queue"))


class InMemoryCoordinator:
    """The broker's side of one transactional.id: the producer epoch that fences older producers, the records
    committed (what a `read_committed` consumer sees) and the last progress seq committed."""

    def __init__(self, delivered: list[KafkaRecord] | None = None) -> None:
        self.delivered: list[KafkaRecord] = [] if delivered is None else delivered
        self.epoch = 0
        self.progress: int | None = None
        self.commits = 0

    def committed(self, _watermark: int = 0) -> int | None:
        """The last seq committed, as the term asks for it (`TermParts.committed`)."""
        return self.progress


class InMemoryTransactionalPublisher(InMemoryPublisher):
    """A transactional producer over `coordinator`: making one fences every earlier one (`init_transactions`);
    a transaction opens at the first send and commits from `poll` at `max_events` or `interval_s`, and on
    `flush` and `close`. Reports of an open transaction are held until its commit; a failed or fenced commit
    reports them failed, and its records never reach `coordinator.delivered`."""

    def __init__(self, on_delivery: Callable[[int, int, KafkaError | None], None], coordinator: InMemoryCoordinator,
                 *, max_events: int = 1000, interval_s: float = 0.0, hold: bool = False,
                 refuse: Verdict | None = None, init_error: KafkaError | None = None) -> None:
        super().__init__(on_delivery, [], hold=hold, refuse=refuse)  # `delivered`: the open transaction's records
        self.coordinator = coordinator
        if init_error is not None:  # init_transactions failed (timed out, refused): this producer never sends
            self.failure = DeliveryFailure(None, init_error.code(), f"init_transactions: {init_error.str()}",
                                           fatal=init_error.fatal())
            self._epoch = -1
        else:
            coordinator.epoch += 1
            self._epoch = coordinator.epoch
        self._max_events = max_events
        self._interval_s = interval_s
        self._began: float | None = None
        self._events = 0
        self._held: list[tuple[int, int]] = []

    def send(self, record: KafkaRecord, generation: int) -> None:
        if self._began is not None and self._events >= self._max_events and self.failure is None:
            super().poll(0)  # the commit waits for every record of the transaction to be answered
            if not self.queued:
                self.commit()
        if self._began is None:
            self._began = time.monotonic()
        self._events += 1
        super().send(record, generation)

    def _report(self, seq: int, generation: int, err: KafkaError | None) -> None:
        if err is None and not self.closed:
            self._held.append((seq, generation))
        else:
            super()._report(seq, generation, err)

    def poll(self, timeout: float) -> int:
        if self._epoch != self.coordinator.epoch and self.failure is None and self.queued:
            # The broker refuses a fenced producer's requests: a fatal error, nothing of it appended.
            self.failure = DeliveryFailure(None, KafkaError.PRODUCER_FENCED, "Broker: Producer fenced", fatal=True)
        served = 0 if is_fenced(self.failure) else super().poll(timeout)
        began = self._began
        if began is not None and self.failure is None and not self.queued and (
                self._events >= self._max_events or time.monotonic() - began >= self._interval_s):
            served += self.commit()
        return served

    def commit(self) -> int:
        """Commit the open transaction (or fail it, when fenced or failed); return how many reports it released."""
        if self._epoch != self.coordinator.epoch and self.failure is None:
            self.failure = DeliveryFailure(None, KafkaError._FENCED, "Local: This instance has been fenced by a "
                                           "newer instance", fatal=True)
        if self.failure is not None:
            self._abort(self.failure.reason)
            return 0
        self.coordinator.delivered.extend(self.delivered)
        if self.delivered:
            self.coordinator.progress = max(record.seq for record in self.delivered)
        self.coordinator.commits += 1
        self.delivered.clear()
        held, self._held = self._held, []
        self._began, self._events = None, 0
        for seq, generation in held:
            self._on_delivery(seq, generation, None)
        return len(held)

    def mark_progress(self, seq: int) -> bool:
        """A transaction of only a progress record at `seq` (`TransactionalPublisher.mark_progress`)."""
        if self._epoch != self.coordinator.epoch and self.failure is None:
            self.failure = DeliveryFailure(None, KafkaError._FENCED, "Local: This instance has been fenced by a "
                                           "newer instance", fatal=True)
        if self.failure is not None:
            return False
        self.coordinator.progress = seq
        self.coordinator.commits += 1
        return True

    def _abort(self, why: str) -> None:
        self.delivered.clear()
        held, self._held = self._held, []
        self._began, self._events = None, 0
        for seq, generation in held:
            super()._report(seq, generation, aborted(why))

    def flush(self, timeout: float) -> int:
        left = super().flush(timeout)
        if not left and self._began is not None:
            self.commit()
        return left + len(self._held)

    def close(self, timeout: float = 0.0) -> None:
        """Commit what is open (unless failed, or nothing was answered yet), then report the rest purged."""
        if self.closed:
            return
        if self._began is not None and not self.hold and timeout > 0:
            super().poll(0)
            self.commit()
        super().close(timeout)
        self._abort("closed")


class AcceptingTopicGuard:
    """A topic guard for which every topic exists and is safe."""

    def ensure(self, topic: str, allow_create: bool) -> TopicReport:
        return TopicReport(topic, exists=True, max_message_bytes=DEFAULT_TOPIC_MAX_MESSAGE_BYTES)


def publisher_factory(delivered: list[KafkaRecord], made: list[InMemoryPublisher] | None = None,
                      *, hold: bool = False, refuse: Verdict | None = None
                      ) -> Callable[[dict[str, Any], Any], InMemoryPublisher]:
    """A `build_daemon(publisher_factory=...)` whose every producer appends to one `delivered` list (and
    to `made`, when given, so a test can reach the current one)."""

    def make(_settings: dict[str, Any], on_delivery: Any) -> InMemoryPublisher:
        publisher = InMemoryPublisher(on_delivery, delivered, hold=hold, refuse=refuse)
        if made is not None:
            made.append(publisher)
        return publisher

    return make
