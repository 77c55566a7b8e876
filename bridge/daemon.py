"""`outbox-bridge run`: tail the outbox in seq order and publish every committed event to Kafka.

One loop, one thread: serve delivery reports, read while the in-flight window has room, persist the
low watermark on an interval (which also renews the lease), and wait for new rows when idle. Any
failed delivery discards the producer and rewinds to the watermark; a database failure backs off
and retries; losing the lease stops publishing at once.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from confluent_kafka import KafkaError

from bridge.backoff import Backoff, BackoffPolicy
from bridge.config import BridgeConfig, PoisonPolicy
from bridge.errors import FencedError, PoisonEventError, TopicSafetyError, TransientStoreError
from bridge.metrics import BridgeMetrics
from bridge.offsets import Lease, OffsetStore
from bridge.producer_settings import producer_settings
from bridge.publisher import KafkaPublisher, Publisher
from bridge.records import DEFAULT_MAX_MESSAGE_BYTES, KafkaRecord, build_record
from bridge.source import OutboxSource, make_engine, make_source
from bridge.store.rows import OutboxRow
from bridge.topics import TopicGuard, TopicPolicy
from bridge.watermark import AckTracker

log = logging.getLogger("bridge.daemon")

EXIT_OK = 0
EXIT_POISON = 3
EXIT_UNSAFE = 4


@dataclass
class _Sent:
    """What the delivery report needs to know about a record in flight."""

    topic: str
    occurred_at: float


class BridgeDaemon:
    """The bridge's main loop for one bridge name; `run()` returns a process exit code."""

    def __init__(
        self,
        config: BridgeConfig,
        metrics: BridgeMetrics | None = None,
        publisher_factory: Callable[[dict[str, Any], Callable[[int, int, KafkaError | None], None]], Publisher]
        | None = None,
        topic_guard: TopicGuard | None = None,
        instance_id: str | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or BridgeMetrics()
        self.instance_id = instance_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.engine = make_engine(config.db_url.get_secret_value())
        self.offsets = OffsetStore(self.engine, config.bridge_name)
        self._publisher_factory = publisher_factory or KafkaPublisher
        self._guard = topic_guard or TopicGuard(
            config.bootstrap_servers,
            TopicPolicy(config.topic_partitions, config.replication_factor, config.allow_single_broker),
        )
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._checked_topics: dict[str, int] = {}
        self._sent: dict[int, _Sent] = {}
        self._tracker: AckTracker | None = None
        self.last_error: str | None = None
        self.holes_settled = 0
        self.halted: PoisonEventError | None = None

    # ------------------------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Ask the loop to stop gracefully (what SIGTERM and SIGINT do)."""
        self._stop.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, _: FrameType | None) -> None:
            log.info("signal received, stopping", extra={"signal": signal.Signals(signum).name})
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> int:
        """Wait for the lease, publish while holding it, and return an exit code when stopped."""
        backoff = Backoff(BackoffPolicy(initial_s=0.2, cap_s=5.0))
        try:
            while not self._stop.is_set():
                try:
                    lease = self._acquire()
                    if lease is None:
                        break
                    code = self._lead(lease)
                    if code != EXIT_OK or self._stop.is_set():
                        return code
                except FencedError as exc:
                    log.warning("lost the lease; standing by", extra={"error": str(exc)})
                    self._set_leader(False)
                except TransientStoreError as exc:
                    self.last_error = str(exc)
                    delay = backoff.next_delay()
                    log.warning("database unavailable; retrying", extra={"error": str(exc), "retry_in_s": delay})
                    self._stop.wait(delay)
                except TopicSafetyError as exc:
                    self.last_error = str(exc)
                    log.error("unsafe topic; stopping", extra={"error": str(exc)})
                    return EXIT_UNSAFE
            return EXIT_OK
        finally:
            self._ready.clear()
            self.engine.dispose()

    def _acquire(self) -> Lease | None:
        """Stand by until the lease is free (another instance died or stopped), then take it."""
        announced = False
        while not self._stop.is_set():
            lease = self.offsets.try_acquire(self.instance_id, self.config.lease_timeout_s)
            if lease is not None:
                log.info("took the lease", extra={"bridge": self.config.bridge_name, "epoch": lease.epoch,
                                                   "watermark": lease.watermark, "instance": self.instance_id})
                return lease
            if not announced:
                log.info("another instance holds the lease; standing by",
                         extra={"bridge": self.config.bridge_name, "instance": self.instance_id})
                announced = True
            self._ready.set()  # a standby is healthy and ready to take over
            self._stop.wait(max(0.2, self.config.lease_timeout_s / 4))
        return None

    def _set_leader(self, leader: bool, epoch: int | None = None) -> None:
        self.metrics.is_leader.set(1 if leader else 0)
        if epoch is not None:
            self.metrics.epoch.set(epoch)

    # ---------------------------------------------------------------------------------- leadership

    def _lead(self, lease: Lease) -> int:
        config = self.config
        self._set_leader(True, lease.epoch)
        tracker = AckTracker(lease.watermark, max_in_flight=config.max_in_flight,
                             max_in_flight_bytes=config.max_in_flight_bytes)
        self._tracker = tracker
        source = make_source(self.engine, lease.watermark)
        publisher = self._new_publisher()
        self._ready.set()
        persisted_at = time.monotonic()
        lease_valid_until = persisted_at + config.lease_timeout_s
        db_backoff = Backoff(BackoffPolicy(initial_s=0.05, cap_s=5.0))
        idle_wait = config.poll_interval_min_ms / 1000
        try:
            while not self._stop.is_set():
                publisher.poll(0)
                if publisher.failure is not None:
                    publisher = self._rebuild(publisher, tracker, source)
                    continue
                read_any = False
                if tracker.has_room(0):
                    try:
                        read_any = self._read_and_send(source, tracker, publisher)
                        db_backoff.reset()
                    except TransientStoreError as exc:
                        self.last_error = str(exc)
                        self.metrics.publish_errors.labels(kind="database").inc()
                        delay = db_backoff.next_delay()
                        log.warning("database read failed; retrying",
                                    extra={"error": str(exc), "retry_in_s": round(delay, 3)})
                        publisher.poll(delay)
                    except PoisonEventError as exc:
                        return self._halt(exc, tracker, publisher, lease)
                now = time.monotonic()
                if now - persisted_at >= config.persist_interval_s:
                    try:
                        self._persist(lease, tracker, source)
                        persisted_at = now
                        lease_valid_until = now + config.lease_timeout_s
                    except TransientStoreError as exc:
                        self.last_error = str(exc)
                        persisted_at = now  # try again next interval
                        if now >= lease_valid_until:
                            # Another instance may have taken over meanwhile: stop publishing.
                            raise FencedError(f"could not renew the lease for {config.lease_timeout_s}s") from exc
                if not read_any:
                    if tracker.unacked_count:
                        publisher.poll(0.005)
                    else:
                        source.wait(idle_wait)
                        idle_wait = min(idle_wait * 2, config.poll_interval_max_ms / 1000)
                else:
                    idle_wait = config.poll_interval_min_ms / 1000
            return self._shutdown(lease, tracker, publisher, source)
        except FencedError:
            publisher.close()
            source.close()
            raise

    def _new_publisher(self) -> Publisher:
        return self._publisher_factory(producer_settings(self.config).conf, self._on_delivery)

    def _rebuild(self, publisher: Publisher, tracker: AckTracker, source: OutboxSource) -> Publisher:
        failure = publisher.failure
        assert failure is not None
        self.last_error = f"delivery of seq {failure.seq} failed: {failure.reason}"
        self.metrics.publish_errors.labels(kind="fatal" if failure.fatal else "delivery").inc()
        self.metrics.producer_rebuilds.inc()
        log.error("delivery failed; rebuilding the producer and rewinding to the watermark",
                  extra={"seq": failure.seq, "error": failure.reason, "watermark": tracker.watermark})
        publisher.close()
        watermark = tracker.rewind()
        self._sent.clear()
        source.rewind(watermark)
        return self._new_publisher()

    # ---------------------------------------------------------------------------------------- read

    def _read_and_send(self, source: OutboxSource, tracker: AckTracker, publisher: Publisher) -> bool:
        limit = min(self.config.read_batch_size, self.config.max_in_flight - tracker.in_flight_count)
        if limit <= 0:
            return False
        batch = source.poll(limit)
        if not batch.rows:
            if batch.waiting_on is not None:
                self.metrics.horizon_held_back.set(1)
            return False
        self.metrics.horizon_held_back.set(1 if batch.waiting_on is not None else 0)
        generation = tracker.generation
        for row in batch.rows:
            if row.seq > tracker.position + 1:
                holes = tracker.settle_holes(row.seq - 1)
                self.holes_settled += holes
                self.metrics.holes_settled.inc(holes)
            record = self._record(row)
            if record is None:
                continue
            tracker.track(row.seq, record.size)
            self._sent[row.seq] = _Sent(record.topic, row.occurred_at.timestamp())
            publisher.send(record, generation)
        self.metrics.in_flight_events.set(tracker.in_flight_count)
        self.metrics.in_flight_bytes.set(tracker.in_flight_bytes)
        return True

    def _record(self, row: OutboxRow) -> KafkaRecord | None:
        """The record for a row (its topic checked once), the dead-letter record, or PoisonEventError."""
        try:
            topic = self.config.topic_for(row.aggregate_type)
            limit = self._topic_limit(topic)
        except ValueError:
            limit = DEFAULT_MAX_MESSAGE_BYTES
        try:
            return build_record(row, self.config.topic_for, limit)
        except PoisonEventError as exc:
            self.metrics.poison_events.labels(policy=self.config.poison_policy.value).inc()
            if self.config.poison_policy is PoisonPolicy.HALT:
                raise
            log.error("poison event sent to the dead-letter topic",
                      extra={"seq": row.seq, "reason": exc.reason, "topic": self.config.dlq_topic_name})
            return self._dead_letter(row, exc.reason)

    def _dead_letter(self, row: OutboxRow, reason: str) -> KafkaRecord:
        topic = self.config.dlq_topic_name
        self._topic_limit(topic)
        value = row.payload.encode()[: DEFAULT_MAX_MESSAGE_BYTES // 2]
        headers = [
            ("event_id", row.event_id.encode()),
            ("event_type", row.event_type.encode()),
            ("aggregate_type", row.aggregate_type.encode()),
            ("seq", str(row.seq).encode()),
            ("occurred_at", row.occurred_at.isoformat().encode()),
            ("dlq_reason", reason.encode()),
            ("dlq_bridge", self.config.bridge_name.encode()),
        ]
        key = (row.aggregate_id or f"seq-{row.seq}").encode()[:1024]
        return KafkaRecord(row.seq, topic, key, value, headers)

    def _topic_limit(self, topic: str) -> int:
        """Check (or create) a topic the first time it is used; return its max.message.bytes."""
        known = self._checked_topics.get(topic)
        if known is not None:
            return known
        report = self._guard.ensure(topic, self.config.allow_create_topics)
        limit = report.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
        self._checked_topics[topic] = limit
        return limit

    # ------------------------------------------------------------------------------------ delivery

    def _on_delivery(self, seq: int, generation: int, err: KafkaError | None) -> None:
        tracker = self._tracker
        if tracker is None or generation != tracker.generation:
            return
        if err is not None:
            self.metrics.publish_errors.labels(kind=err.name()).inc()
            return
        sent = self._sent.pop(seq, None)
        if tracker.ack(seq, generation) and sent is not None:
            self.metrics.events_published.labels(topic=sent.topic).inc()
            self.metrics.commit_to_ack_seconds.observe(max(0.0, time.time() - sent.occurred_at))

    # ------------------------------------------------------------------------------------- persist

    def _status(self, tracker: AckTracker, source: OutboxSource) -> dict[str, Any]:
        head = source.head_seq()
        oldest = source.oldest_after(tracker.watermark)
        lag_seconds = 0.0
        if oldest is not None:
            lag_seconds = max(0.0, time.time() - oldest.occurred_at.timestamp())
        holder = source.horizon_holder()
        self.metrics.head_seq.set(head)
        self.metrics.watermark_seq.set(tracker.watermark)
        self.metrics.lag_events.set(max(0, head - tracker.watermark))
        self.metrics.lag_seconds.set(lag_seconds)
        self.metrics.in_flight_events.set(tracker.in_flight_count)
        self.metrics.in_flight_bytes.set(tracker.in_flight_bytes)
        if holder is not None and holder.get("started_at"):
            started = datetime.fromisoformat(holder["started_at"])
            self.metrics.horizon_oldest_xact_age_seconds.set((datetime.now(UTC) - started).total_seconds())
        elif holder is None:
            self.metrics.horizon_oldest_xact_age_seconds.set(0)
        return {
            "instance": self.instance_id,
            "watermark": tracker.watermark,
            "head_seq": head,
            "lag_events": max(0, head - tracker.watermark),
            "lag_seconds": round(lag_seconds, 3),
            "in_flight": tracker.in_flight_count,
            "unacked": tracker.unacked_count,
            "horizon_holder": holder,
            "holes_settled": self.holes_settled,
            "last_error": self.last_error,
            "updated_at": datetime.now(UTC).isoformat(),
        }

    def _persist(self, lease: Lease, tracker: AckTracker, source: OutboxSource) -> None:
        status = self._status(tracker, source)
        if status["horizon_holder"]:
            log.warning("a long transaction holds publishing back", extra={"holder": status["horizon_holder"]})
        self.offsets.persist(lease, tracker.watermark, self.config.lease_timeout_s, status)
        self.metrics.last_persist_timestamp_seconds.set(time.time())

    # ------------------------------------------------------------------------------------ stopping

    def _drain(self, tracker: AckTracker, publisher: Publisher) -> None:
        deadline = time.monotonic() + self.config.shutdown_timeout_s
        while tracker.unacked_count and time.monotonic() < deadline and publisher.failure is None:
            publisher.poll(0.05)

    def _shutdown(self, lease: Lease, tracker: AckTracker, publisher: Publisher, source: OutboxSource) -> int:
        """Stop reading, wait (bounded) for in-flight acks, persist the watermark, give up the lease."""
        log.info("stopping: waiting for in-flight deliveries",
                 extra={"unacked": tracker.unacked_count, "timeout_s": self.config.shutdown_timeout_s})
        self._drain(tracker, publisher)
        if tracker.unacked_count:
            log.warning("stopped with deliveries unconfirmed; they will be re-sent after restart",
                        extra={"unacked": tracker.unacked_count, "watermark": tracker.watermark})
        publisher.close()
        try:
            self._persist(lease, tracker, source)
            self.offsets.release(lease)
        finally:
            source.close()
            self._set_leader(False)
        log.info("stopped", extra={"watermark": tracker.watermark})
        return EXIT_OK

    def _halt(self, exc: PoisonEventError, tracker: AckTracker, publisher: Publisher, lease: Lease) -> int:
        """Poison policy `halt`: publish everything before the bad row, persist, and stop naming it."""
        self.halted = exc
        self.last_error = str(exc)
        log.error("halting on a poison event; fix or remove the row, or run with BRIDGE_POISON_POLICY=dead-letter",
                  extra={"seq": exc.seq, "reason": exc.reason})
        self._drain(tracker, publisher)
        publisher.close()
        status = {"instance": self.instance_id, "watermark": tracker.watermark, "halted_at_seq": exc.seq,
                  "last_error": str(exc), "updated_at": datetime.now(UTC).isoformat()}
        self.offsets.persist(lease, tracker.watermark, self.config.lease_timeout_s, status)
        self.offsets.release(lease)
        return EXIT_POISON
