"""`outbox-bridge run`: tail the outbox in seq order and publish every committed event to Kafka.

One loop, one thread: serve delivery reports, persist the low watermark on an interval (which also
renews the lease and picks up rewind requests), read while the in-flight window has room, and wait
for new rows when idle. Any failed delivery discards the producer and rewinds to the watermark; a
record Kafka refuses for good is treated as a poison event; a database or admin failure backs off
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

from confluent_kafka import KafkaError, KafkaException

from bridge.backoff import Backoff, BackoffPolicy
from bridge.config import BridgeConfig, PoisonPolicy
from bridge.core.holes import SeqRange
from bridge.core.watermark import AckTracker
from bridge.errors import FencedError, PoisonEventError, TopicSafetyError, TransientStoreError
from bridge.metrics import BridgeMetrics
from bridge.offsets import Lease, OffsetStore
from bridge.producer_settings import producer_settings
from bridge.publisher import CLOSE_TIMEOUT_S, KafkaPublisher, Publisher
from bridge.records import DEFAULT_MAX_MESSAGE_BYTES, KafkaRecord, TopicRouter, build_record
from bridge.store.engine import make_engine, make_reader
from bridge.store.reader import OutboxReader
from bridge.store.rows import OutboxRow
from bridge.topics import TopicGuard, TopicPolicy

log = logging.getLogger("bridge.daemon")

EXIT_OK = 0
EXIT_POISON = 3
EXIT_UNSAFE = 4

#: librdkafka's default `message.max.bytes`: the producer refuses a larger record before sending it.
PRODUCER_MAX_MESSAGE_BYTES = 1_000_000
#: Delivery errors about the records, not the cluster: sending them again fails again. The broker
#: refuses a whole batch, so each record it named is sent again alone (after everything before it is
#: acknowledged); one refused alone goes to the poison policy instead of being retried forever.
RECORD_REFUSED = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_MSG_SIZE,
})
#: How long a rewind waits for in-flight acks before it discards the producer.
REWIND_DRAIN_S = 10.0


@dataclass(slots=True)
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
        extra_limit = config.producer_extra.get("message.max.bytes")
        # The producer refuses larger records before sending them; the configuration never changes.
        self._producer_limit = int(str(extra_limit)) if extra_limit is not None else PRODUCER_MAX_MESSAGE_BYTES
        self._route = TopicRouter(config.topic_for)
        self._published: dict[str, Any] = {}  # topic -> its events_published child, looked up once
        self._published_pending: dict[str, int] = {}  # acks not yet added to events_published
        self._sent: dict[int, _Sent] = {}
        self._tracker: AckTracker | None = None
        self.last_error: str | None = None
        self.holes_settled = 0
        self.halted: PoisonEventError | None = None
        self.rewinds_applied = 0
        # RECORD_REFUSED reports, with the reason: `_suspects` came in a batch (maybe refused for another
        # record's sake) and are sent again alone; `_refused` were refused alone, so they are poison.
        self._suspects: dict[int, str] = {}
        self._refused: dict[int, str] = {}
        self._solo_seq: int | None = None
        self._leading = False
        self._lease_deadline = 0.0
        self.retention_passes = 0

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
        if self.config.retention_period is not None:
            threading.Thread(target=self._retention_loop, name="outbox-retention", daemon=True).start()
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
        self._leading = leader
        self.metrics.is_leader.set(1 if leader else 0)
        if epoch is not None:
            self.metrics.epoch.set(epoch)

    def _retention_loop(self) -> None:
        """Every `retention_interval_s`, while this instance leads, delete published rows past retention.

        The same work as `outbox-bridge cleanup --older-than`: small batches, never above the persisted
        watermark. It runs beside the publishing loop, on its own connections, so publishing goes on.
        """
        from bridge.admin import cleanup

        period = self.config.retention_period
        assert period is not None
        while not self._stop.wait(self.config.retention_interval_s):
            if not self._leading:
                continue
            try:
                result = cleanup(self.config, period, dry_run=False, show_progress=False)
            except Exception as exc:  # noqa: BLE001 - a failed pass is retried next interval; publishing goes on
                self._note_error("retention", exc)
                log.warning("retention pass failed; retrying next interval",
                            extra={"error": str(exc), "retry_in_s": self.config.retention_interval_s})
                continue
            self.retention_passes += 1
            self.metrics.retention_deleted.inc(result["deleted"])
            if result["deleted"]:
                log.info("retention pass", extra={"deleted": result["deleted"], "watermark": result["watermark"],
                                                  "cutoff": result["cutoff"]})

    # ---------------------------------------------------------------------------------- leadership

    def _lead(self, lease: Lease) -> int:
        config = self.config
        self._set_leader(True, lease.epoch)
        tracker = AckTracker(lease.watermark, max_in_flight=config.max_in_flight,
                             max_in_flight_bytes=config.max_in_flight_bytes)
        self._tracker = tracker
        self._sent.clear()
        source = make_reader(self.engine)
        publisher = self._new_publisher()
        self._ready.set()
        persisted_at = time.monotonic()
        lease_valid_until = persisted_at + config.lease_timeout_s
        self._lease_deadline = lease_valid_until
        backoff = Backoff(BackoffPolicy(initial_s=0.05, cap_s=5.0))
        idle_min = config.poll_interval_min_ms / 1000
        idle_wait = idle_min
        try:
            while not self._stop.is_set():
                publisher.poll(0)
                self._flush_published()
                if publisher.failure is not None:
                    publisher = self._rebuild(publisher, tracker, source)
                    continue
                # Renew the lease before reading: a process that was paused past its lease finds out
                # here, before it sends anything more.
                now = time.monotonic()
                if now - persisted_at >= config.persist_interval_s or now >= lease_valid_until:
                    try:
                        self._persist(lease, tracker, source)
                        # Counted from before the renewal was sent, on this machine's monotonic clock.
                        lease_valid_until = self._lease_deadline = now + config.lease_timeout_s
                        publisher = self._pick_up_rewind(lease, tracker, source, publisher)
                    except TransientStoreError as exc:
                        self._note_error("database", exc)
                        if time.monotonic() >= lease_valid_until:
                            # Another instance may have taken over meanwhile: stop publishing.
                            raise FencedError(f"could not renew the lease for {config.lease_timeout_s}s") from exc
                    persisted_at = now
                read_any = False
                if tracker.has_room(0):
                    try:
                        read_any = self._read_and_send(source, tracker, publisher)
                        backoff.reset()
                    except (TransientStoreError, KafkaException) as exc:
                        # The database (reading rows) or the admin API (checking a new topic) failed:
                        # nothing is lost, the next read starts after the last seq handed to Kafka.
                        self._note_error("database" if isinstance(exc, TransientStoreError) else "admin", exc)
                        delay = backoff.next_delay()
                        log.warning("reading or routing failed; retrying",
                                    extra={"error": str(exc), "retry_in_s": round(delay, 3)})
                        publisher.poll(delay)
                    except PoisonEventError as exc:
                        return self._halt(exc, lease, tracker, publisher, source)
                    except TopicSafetyError as exc:
                        self.last_error = str(exc)
                        log.error("unsafe topic; stopping", extra={"error": str(exc)})
                        return self._shutdown(lease, tracker, publisher, source, EXIT_UNSAFE)
                if read_any:
                    idle_wait = idle_min
                    continue
                if tracker.unacked_count:
                    # Waiting for acks: poll returns as soon as one arrives, so this costs no latency,
                    # and while Kafka is unreachable it keeps the loop from querying the outbox hot.
                    publisher.poll(idle_wait)
                else:
                    source.wait(idle_wait)
                idle_wait = min(idle_wait * 2, config.poll_interval_max_ms / 1000)
            return self._shutdown(lease, tracker, publisher, source, EXIT_OK)
        except FencedError:
            self._flush_published()
            publisher.close()
            source.close()
            raise

    def _note_error(self, kind: str, exc: Exception) -> None:
        self.last_error = str(exc)
        self.metrics.publish_errors.labels(kind=kind).inc()

    def _new_publisher(self) -> Publisher:
        return self._publisher_factory(producer_settings(self.config).conf, self._on_delivery)

    def _rebuild(self, publisher: Publisher, tracker: AckTracker, source: OutboxReader) -> Publisher:
        failure = publisher.failure
        assert failure is not None
        self.last_error = f"delivery of seq {failure.seq} failed: {failure.reason}"
        self.metrics.publish_errors.labels(kind="fatal" if failure.fatal else "delivery").inc()
        self.metrics.producer_rebuilds.inc()
        log.error("delivery failed; rebuilding the producer and rewinding to the watermark",
                  extra={"seq": failure.seq, "error": failure.reason, "watermark": tracker.watermark,
                         "suspect_seqs": sorted(self._suspects)[:10], "refused_seqs": sorted(self._refused)})
        # Finished for good before anything is sent again, so nothing it sent lands after the re-sends; its
        # last reports still count (acks move the watermark, refusals name suspects). Bounded well inside
        # the lease, which is not renewed meanwhile.
        publisher.close(min(CLOSE_TIMEOUT_S, self.config.lease_timeout_s / 2))
        return self._restart_from(tracker.watermark, tracker, source)

    def _restart_from(self, watermark: int, tracker: AckTracker, source: OutboxReader) -> Publisher:
        """Forget everything in flight, continue reading after `watermark`, with a new producer."""
        tracker.reset(watermark)
        self._sent.clear()
        self._solo_seq = None
        source.forget_holes()
        return self._new_publisher()

    # ---------------------------------------------------------------------------------------- read

    def _read_and_send(self, source: OutboxReader, tracker: AckTracker, publisher: Publisher) -> bool:
        """Read after the tracker's position (the one cursor) and send what the read allows, in seq order.

        The tracker takes exactly the holes the reader settled and refuses any other gap. Stopping early
        (the window is full, a suspect record must go alone) needs no rewind: the next read starts after
        the last seq the tracker accounted for.
        """
        limit = min(self.config.read_batch_size, self.config.max_in_flight - tracker.in_flight_count)
        if limit <= 0 or self._solo_seq is not None:
            return False
        batch = source.poll(tracker.position, limit)
        self.metrics.horizon_held_back.set(1 if batch.waiting_on is not None else 0)
        if not batch.rows:
            return False
        generation = tracker.generation
        sent_any = False
        try:
            for row in batch.in_order():
                if isinstance(row, SeqRange):
                    holes = tracker.settle(row)
                    self.holes_settled += holes
                    self.metrics.holes_settled.inc(holes)
                    continue
                alone = row.seq in self._suspects
                if alone and tracker.unacked_count:
                    break  # send it once everything before it is acknowledged
                if not tracker.has_room(len(row.payload)):
                    break  # the byte window is full: the rest is read again once acks make room
                record = self._record(row)
                if time.monotonic() >= self._lease_deadline:
                    # Checked before every send: a read, a topic check or a pause may have outlasted
                    # the lease, and a standby may lead by now.
                    raise FencedError(f"the lease ran out before seq {row.seq} was sent; standing down")
                tracker.track(row.seq, record.size)
                self._sent[row.seq] = _Sent(record.topic, row.occurred_at.timestamp())
                publisher.send(record, generation)
                sent_any = True
                if alone:
                    self._solo_seq = row.seq
                    break  # and nothing after it until it is acknowledged
            return sent_any
        finally:
            self.metrics.in_flight_events.set(tracker.in_flight_count)
            self.metrics.in_flight_bytes.set(tracker.in_flight_bytes)

    def _record(self, row: OutboxRow) -> KafkaRecord:
        """The record for a row (its topic checked once), the dead-letter record, or PoisonEventError."""
        try:
            refused = self._refused.pop(row.seq, None)
            if refused is not None:
                raise PoisonEventError(row.seq, f"Kafka refused the record: {refused}")
            try:
                topic = self._route(row.aggregate_type)
            except ValueError:
                limit = self._producer_limit  # unroutable: build_record says so
            else:
                limit = min(self._topic_limit(topic), self._producer_limit)
            return build_record(row, self._route, limit)
        except PoisonEventError as exc:
            self.metrics.poison_events.labels(policy=self.config.poison_policy.value).inc()
            if self.config.poison_policy is PoisonPolicy.HALT:
                raise
            log.error("poison event sent to the dead-letter topic",
                      extra={"seq": row.seq, "reason": exc.reason, "topic": self.config.dlq_topic_name})
            return self._dead_letter(row, exc.reason)

    def _dead_letter(self, row: OutboxRow, reason: str) -> KafkaRecord:
        topic = self.config.dlq_topic_name
        limit = min(self._topic_limit(topic), self._producer_limit)
        headers = [
            ("event_id", row.event_id.encode()),
            ("event_type", row.event_type.encode()),
            ("aggregate_type", row.aggregate_type.encode()),
            ("seq", str(row.seq).encode()),
            ("occurred_at", row.occurred_at.isoformat().encode()),
            ("dlq_reason", reason.encode()[:4096]),
            ("dlq_bridge", self.config.bridge_name.encode()),
        ]
        key = (row.aggregate_id or f"seq-{row.seq}").encode()[:1024]
        value = row.payload.encode()
        record = KafkaRecord.of(row.seq, topic, key, value, headers)
        if record.size > limit:
            # Too large even for the dead-letter topic: keep what fits, and say so.
            headers.append(("dlq_payload_truncated_from", str(len(value)).encode()))
            value = value[: max(0, limit - (record.size - len(value)) - 64)]
            record = KafkaRecord.of(row.seq, topic, key, value, headers)
        return record

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
            if err.code() in RECORD_REFUSED:
                sent = self._sent.get(seq)
                reason = f"{err.name()}: {err.str()}"
                if seq == self._solo_seq:
                    self._refused[seq] = reason
                else:
                    self._suspects.setdefault(seq, reason)
                if sent is not None:
                    # The topic's limits may have changed since it was checked: check it again.
                    self._checked_topics.pop(sent.topic, None)
            return
        sent = self._sent.pop(seq, None)
        if seq == self._solo_seq:
            self._solo_seq = None
            self._suspects.pop(seq, None)
        if tracker.ack(seq, generation) and sent is not None:
            # Counted here, added to the counter once per loop turn (`_flush_published`): a locked
            # increment per event cost more than the rest of the ack.
            pending = self._published_pending
            pending[sent.topic] = pending.get(sent.topic, 0) + 1
            self.metrics.commit_to_ack_seconds.observe(max(0.0, time.time() - sent.occurred_at))

    def _flush_published(self) -> None:
        if not self._published_pending:
            return
        for topic, count in self._published_pending.items():
            published = self._published.get(topic)
            if published is None:
                published = self._published[topic] = self.metrics.events_published.labels(topic=topic)
            published.inc(count)
        self._published_pending.clear()

    # ------------------------------------------------------------------------------------- persist

    def _status(self, tracker: AckTracker, source: OutboxReader) -> dict[str, Any]:
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
            "rewinds_applied": self.rewinds_applied,
            "last_error": self.last_error,
            "updated_at": datetime.now(UTC).isoformat(),
        }

    def _persist(self, lease: Lease, tracker: AckTracker, source: OutboxReader) -> None:
        status = self._status(tracker, source)
        if status["horizon_holder"]:
            log.warning("a long transaction holds publishing back", extra={"holder": status["horizon_holder"]})
        self.offsets.persist(lease, tracker.watermark, self.config.lease_timeout_s, status)
        self.metrics.last_persist_timestamp_seconds.set(time.time())

    # -------------------------------------------------------------------------------------- rewind

    def _pick_up_rewind(self, lease: Lease, tracker: AckTracker, source: OutboxReader,
                        publisher: Publisher) -> Publisher:
        """Apply the oldest pending rewind request (`outbox-bridge replay --mode rewind`), if any.

        Waits (bounded) for in-flight acks so nothing below the new start is sent again, discards the
        producer, lowers the persisted watermark under this lease's epoch together with marking the
        request applied, and continues reading from the request's `from_seq`.
        """
        request = self.offsets.pending_rewind()
        if request is None:
            return publisher
        target = request.from_seq - 1
        if target > tracker.watermark:
            # Moving forward would skip events; the replay command checks this, but the watermark may
            # have been lowered by another rewind since.
            why = f"from_seq {request.from_seq} is above watermark {tracker.watermark} + 1; a rewind never skips"
            log.error("refusing a rewind request", extra={"request": request.id, "reason": why})
            self.offsets.refuse_rewind(request, why)
            return publisher
        log.info("applying a rewind request", extra={"request": request.id, "from_seq": request.from_seq,
                                                     "watermark": tracker.watermark,
                                                     "requested_by": request.requested_by})
        # Bounded well inside the lease, which is not renewed meanwhile.
        self._drain(tracker, publisher,
                    min(REWIND_DRAIN_S, self.config.shutdown_timeout_s, self.config.lease_timeout_s / 2))
        publisher.close()
        resume_at = tracker.watermark  # if the request cannot be applied now, carry on from here
        try:
            applied = self.offsets.apply_rewind(lease, request, self.config.lease_timeout_s)
        except TransientStoreError as exc:
            self._note_error("database", exc)
            log.warning("could not apply the rewind request now; retrying at the next persist",
                        extra={"request": request.id, "error": str(exc)})
            applied = False
        else:
            if not applied:
                log.warning("rewind request no longer pending; ignored", extra={"request": request.id})
        if applied:
            resume_at = target
            self.rewinds_applied += 1
            log.info("rewound", extra={"request": request.id, "watermark": target})
        publisher = self._restart_from(resume_at, tracker, source)
        self.metrics.watermark_seq.set(tracker.watermark)
        return publisher

    # ------------------------------------------------------------------------------------ stopping

    def _drain(self, tracker: AckTracker, publisher: Publisher, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.config.shutdown_timeout_s if timeout is None else timeout)
        while tracker.unacked_count and time.monotonic() < deadline and publisher.failure is None:
            publisher.poll(0.05)

    def _shutdown(self, lease: Lease, tracker: AckTracker, publisher: Publisher, source: OutboxReader,
                  code: int, halted_at: PoisonEventError | None = None) -> int:
        """Stop reading, wait (bounded) for in-flight acks, persist the watermark, give up the lease."""
        log.info("stopping: waiting for in-flight deliveries",
                 extra={"unacked": tracker.unacked_count, "timeout_s": self.config.shutdown_timeout_s})
        self._drain(tracker, publisher)
        self._flush_published()
        if tracker.unacked_count:
            log.warning("stopped with deliveries unconfirmed; they will be re-sent after restart",
                        extra={"unacked": tracker.unacked_count, "watermark": tracker.watermark})
        publisher.close()
        try:
            status = self._status(tracker, source)
            if halted_at is not None:
                status["halted_at_seq"] = halted_at.seq
            self.offsets.persist(lease, tracker.watermark, self.config.lease_timeout_s, status)
            self.offsets.release(lease)
        except (TransientStoreError, FencedError) as exc:
            # Still exit with the code that says why we stopped; the only cost is duplicates after a restart.
            self.last_error = str(exc)
            log.error("could not persist the final watermark; a restart re-sends from the last persisted one",
                      extra={"watermark": tracker.watermark, "error": str(exc)})
        finally:
            source.close()
            self._set_leader(False)
        log.info("stopped", extra={"watermark": tracker.watermark, "exit_code": code})
        return code

    def _halt(self, exc: PoisonEventError, lease: Lease, tracker: AckTracker, publisher: Publisher,
              source: OutboxReader) -> int:
        """Poison policy `halt`: publish everything before the bad row, persist, and stop naming it."""
        self.halted = exc
        self.last_error = str(exc)
        log.error("halting on a poison event; fix or remove the row, or run with BRIDGE_POISON_POLICY=dead-letter",
                  extra={"seq": exc.seq, "reason": exc.reason})
        return self._shutdown(lease, tracker, publisher, source, EXIT_POISON, halted_at=exc)
