"""The Kafka side of the bridge: an idempotent producer that reports each delivery back by seq.

The canonical confluent-kafka loop: `produce(..., on_delivery=...)`, poll often, poll on BufferError,
flush at the end. A fatal or non-retriable delivery error is recorded, not raised from the callback:
the daemon then discards this producer, builds a new one and rewinds to the watermark. Discarding
means finished for good (`close`): nothing the old producer sent may land after the re-sends.
"""

from __future__ import annotations

import logging
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from bridge.core.records import KafkaRecord
from bridge.kafka.access import AUTHORIZATION_CODES, is_authentication_failure, is_certificate_failure
from bridge.kafka.reachability import quiet_client_settings, reachability
from bridge.kafka.refusal_text import denial_named

log = logging.getLogger("bridge.kafka.publisher")

#: librdkafka's RD_KAFKA_PARTITION_UA: the partitioner picks the partition (`produce`'s default).
PARTITION_ANY = -1

#: Called with (seq, generation, error or None) for every delivery report.
DeliveryCallback = Callable[[int, int, KafkaError | None], None]

#: How long `close` waits, by default, for the broker to answer what is in flight. On a healthy
#: cluster the answers take milliseconds; a broker that does not answer within this will not soon.
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    """Why the current producer must be discarded."""

    seq: int | None
    code: int
    reason: str
    fatal: bool


class Publisher(Protocol):
    """What the daemon needs from a Kafka producer: `KafkaPublisher`, and the in-memory one of
    `bridge.kafka.testing` for unit tests, which meets the same contract (tests/contracts/publisher.py)."""

    #: Set by the first failed delivery: this producer is to be discarded.
    failure: DeliveryFailure | None

    def send(self, record: KafkaRecord, generation: int) -> None:
        """Hand `record` over; its delivery is reported once, later, with `generation`, in send order per key."""
        ...

    def poll(self, timeout: float) -> int:
        """Serve delivery reports; a positive count when any were served (a batch of them may count as one)."""
        ...

    def flush(self, timeout: float) -> int:
        """Wait up to `timeout` seconds until everything sent is reported; return how many are still unsent."""
        ...

    def send_queued(self, timeout: float) -> int:
        """Send what is queued now rather than when its batch's linger.ms runs out, serving reports meanwhile for
        up to `timeout` seconds; the daemon's wait after a read that caught up (nothing more will join those
        batches). Returns how many records are still unanswered."""
        ...

    def close(self, timeout: float = ...) -> None:
        """Finish for good within about `timeout` seconds, every record sent reported by then, delivered or not."""
        ...


#: The shortest wait librdkafka makes: it counts in whole milliseconds (confluent-kafka truncates the timeout).
MIN_WAIT_S = 0.001


def unconfirmed(seq: int) -> KafkaError:
    """The error for a delivery librdkafka reports as a success without an offset: not an acknowledgement.

    librdkafka counts a retried batch as delivered when the broker answers that its sequence numbers are
    duplicates, and gives it no offset. But a broker accepts any first sequence from a producer id it does
    not know yet, so when the first request of a new producer to a partition fails (the partition was
    created a moment ago, or its leader moved) and the next one succeeds, the first batch is never
    appended and still reported delivered. Seen here: four events of a partition created 30 ms after they
    were sent were reported delivered and are not in the log. Counted as a failed delivery, the daemon
    rebuilds the producer and sends again from the watermark: at worst a duplicate, never a loss."""
    return KafkaError(
        KafkaError._INCONSISTENT,
        f"Kafka reported seq {seq} delivered without an offset (a batch librdkafka took for a duplicate); the "
        "broker may never have appended it, so it is sent again",
    )


def _forward_error(on_error: weakref.WeakMethod[Callable[[KafkaError], None]], err: KafkaError) -> None:
    method = on_error()
    if method is not None:
        method(err)


class KafkaPublisher:
    """One confluent-kafka Producer; build a new one after `failure` is set."""

    def __init__(self, settings: dict[str, Any], on_delivery: DeliveryCallback) -> None:
        self.failure: DeliveryFailure | None = None
        self._on_delivery = on_delivery
        self._closed = False
        # The error callback holds this publisher weakly: a bound method would close a reference cycle
        # (producer -> error_cb -> publisher -> producer) that outlives `close` and keeps the producer alive.
        servers = str(settings.get("bootstrap.servers", ""))
        self._reachability = reachability(servers)
        self._producer = Producer({
            **quiet_client_settings(servers),
            **settings,
            "error_cb": partial(_forward_error, weakref.WeakMethod(self._on_error)),
        })

    def _on_error(self, err: KafkaError) -> None:
        # Broker down, all brokers down, timeouts: librdkafka keeps retrying within delivery.timeout.ms.
        # A fatal error never comes here: confluent-kafka raises it from poll and flush instead (`_serve`).
        if is_authentication_failure(err) or is_certificate_failure(err):
            # Refused credentials or certificate (a rotated password, say): retrying cannot fix it, and
            # librdkafka would reconnect every few dozen milliseconds. The daemon stops on this failure.
            if self.failure is None:
                self.failure = DeliveryFailure(None, err.code(), err.str(), fatal=True)
            return
        # Unreachable brokers are reported once in a while, not at every reconnect (`reachability`).
        if not self._reachability.error(err):
            log.warning("producer error, retrying", extra={"error": err.str(), "code": err.name()})

    def send(self, record: KafkaRecord, generation: int) -> None:
        # One partial per record (made in C), not a closure: this runs for every event.
        on_delivery = partial(self._delivered, record.seq, generation)
        headers: Any = record.headers  # read, never changed
        while True:
            try:
                # Positional (`PARTITION_ANY`, the report callback, no alias, timestamp 0 = now, headers): keywords
                # cost confluent-kafka's argument parsing 0.2 us more per call, a few percent of a backlog.
                self._producer.produce(record.topic, record.value, record.key, PARTITION_ANY, on_delivery, None, 0,
                                       headers)
                return
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                self._producer.poll(0.05)
            except KafkaException as exc:
                # Refused before it was queued (too large for message.max.bytes, unknown topic, ...):
                # report it like a failed delivery, so every record gets exactly one report.
                err = exc.args[0]
                if self.failure is None:
                    self.failure = DeliveryFailure(record.seq, err.code(), err.str(), fatal=err.fatal())
                self._on_delivery(record.seq, generation, err)
                return

    def _delivered(self, seq: int, generation: int, err: KafkaError | None, msg: Message) -> None:
        # librdkafka has already retried within delivery.timeout.ms: a reported error is final, and
        # ordering past this seq can no longer be trusted, so the daemon rewinds.
        if err is None:
            offset = msg.offset()
            if offset is None or offset < 0:
                err = unconfirmed(seq)
        if err is not None and self.failure is None:
            self.failure = DeliveryFailure(seq, err.code(), err.str(), fatal=err.fatal())
        self._on_delivery(seq, generation, err)

    def _serve(self, serve: Callable[[float], int], timeout: float) -> int:
        """Serve reports with `serve` (poll or flush); a fatal error, which confluent-kafka raises from
        them instead of calling error_cb, becomes `failure` like any other."""
        try:
            if 0.0 < timeout < MIN_WAIT_S:
                # Truncated to 0 the wait would return at once, and the daemon, waiting out the rest of its read
                # interval in such calls, would spin a core (0.87 of one at 1,000 commits/s with a 1 ms interval):
                # serve what is there, then sleep the rest.
                served = int(serve(0))
                if not served:
                    time.sleep(timeout)
                return served
            return int(serve(timeout))
        except KafkaException as exc:
            self._note_fatal(exc)
            return len(self._producer)
        except SystemError as exc:
            # librdkafka's flush serves reports in a loop and goes on after a fatal error was raised, so the next
            # report's callback fails with the error still set (`flush`'s docstring): this producer is done for,
            # like after any fatal error. Its reports that were lost do not matter: the term discards it and sends
            # again from the watermark.
            if self.failure is None or not self.failure.fatal:
                cause = exc.__cause__ or exc.__context__
                self.failure = DeliveryFailure(None, KafkaError._FATAL, f"{cause or exc}", fatal=True)
            log.error("fatal producer error while serving reports", extra={"error": str(exc)})
            return len(self._producer)

    def _note_fatal(self, exc: KafkaException) -> None:
        err = exc.args[0] if exc.args else None
        if not (isinstance(err, KafkaError) and err.fatal()):
            raise exc
        if self.failure is None or not self.failure.fatal:
            self.failure = DeliveryFailure(None, err.code(), err.str(), fatal=True)
        # A refusal by the ACLs is the daemon's to report, once, naming what to grant.
        refused = err.code() in AUTHORIZATION_CODES or denial_named(err.str()) is not None
        level = logging.WARNING if refused else logging.ERROR
        log.log(level, "fatal producer error", extra={"error": err.str(), "code": err.name()})

    def poll(self, timeout: float) -> int:
        return self._serve(self._producer.poll, timeout)

    def send_queued(self, timeout: float) -> int:
        # librdkafka ignores linger.ms while a flush runs, and wakes its broker threads to send at once; the call
        # must last until they have woken (one ending before stays unheard), so it waits at least a millisecond.
        return self._serve(self._producer.flush, max(timeout, MIN_WAIT_S))

    def flush(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for outstanding deliveries; return how many are still unsent.

        Served by poll, not by the client's flush: a fatal error raised while flush serves reports stays set
        while librdkafka goes on calling delivery callbacks, and the next one fails with a SystemError, its
        report lost (seen when a refused batch breaks the gapless guarantee). A poll stops at the error."""
        deadline = time.monotonic() + timeout
        remaining = len(self._producer)
        while remaining and time.monotonic() < deadline:
            self._serve(self._producer.poll, min(0.1, max(0.0, deadline - time.monotonic())))
            remaining = len(self._producer)
        return remaining

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Finish this producer for good: drop what is queued, wait up to `timeout` seconds for the broker
        to answer what is in flight (each delivery is reported), then destroy it and its threads."""
        if self._closed:
            return
        self._closed = True
        producer = self._producer
        deadline = time.monotonic() + timeout
        # Queued messages were never sent: drop them (reported as _PURGE_QUEUE; the daemon rewinds anyway).
        # Purged again on every turn, as a failed request puts its messages back in the queue for a retry.
        producer.purge(in_queue=True, in_flight=False)
        self._serve(producer.poll, 0)
        while len(producer) and time.monotonic() < deadline:
            self._serve(producer.poll, min(0.05, max(0.0, deadline - time.monotonic())))
            producer.purge(in_queue=True, in_flight=False)
        unanswered = len(producer)
        if unanswered:
            # Some requests may be on the wire: the broker may still append them, after anything sent later.
            # The count is an upper bound: librdkafka purges what its broker threads hold asynchronously, so
            # queued records not yet reported as purged are in it too (seen: 1,000 counted, 0 to 250 sent).
            log.warning("producer closed with records unanswered; those already sent may land after the re-sends",
                        extra={"unanswered_at_most": unanswered, "timeout_s": timeout})
            producer.purge(in_queue=True, in_flight=True)
            # The purged messages are reported at once; a fatal error raised meanwhile (with gapless, a purged
            # request counts as a gap) interrupts a poll, so poll until all are served.
            served_by = time.monotonic() + 1.0
            while len(producer) and time.monotonic() < served_by:
                self._serve(producer.poll, 0.01)
        # Every message is reported now, so no delivery callback holds this publisher; close() flushes
        # (nothing is left), then destroys the librdkafka instance, its connections and its threads.
        try:
            with warnings.catch_warnings():
                # A transactional producer aborts its open transaction here, and warns on stderr when it cannot
                # (its init_transactions still under way, or fenced): the broker ends that transaction anyway.
                warnings.simplefilter("ignore", RuntimeWarning)
                producer.close()
        except KafkaException as exc:  # a fatal error not yet served; the producer is destroyed all the same
            self._note_fatal(exc)

    def __len__(self) -> int:
        return len(self._producer)
