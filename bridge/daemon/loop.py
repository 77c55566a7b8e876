"""The bridge's loop: tail the outbox in seq order and publish every committed event to Kafka.

One loop, one thread: serve delivery reports, checkpoint on an interval (late rows, persist and renew,
rewind requests), read while the in-flight window has room, and wait for new rows when idle. A failed
delivery discards the producer and rewinds to the watermark; a database or admin failure backs off
and retries; losing the lease stops publishing at once. The collaborators decide (`Leadership`,
`PoisonGate`, `rewinds`, `Refusals`); only this loop acts.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import FrameType, MappingProxyType
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from bridge.backoff import Backoff, BackoffPolicy
from bridge.config import LoopSection, RetentionSection, TopicSection
from bridge.core.holes import SeqRange
from bridge.core.late import SettledHoles
from bridge.core.refusals import Refusals
from bridge.core.watermark import AckTracker
from bridge.daemon import history, rewinds
from bridge.daemon.leadership import Leadership
from bridge.daemon.poison import PRODUCER_MAX_MESSAGE_BYTES, PoisonGate
from bridge.daemon.retention import Retention
from bridge.daemon.startup import Failing, Startup, StartupClock, StartupStep
from bridge.daemon.status import holder_age_s, report
from bridge.errors import (
    DatabaseLoginError,
    DatabaseTlsError,
    FencedError,
    NotMigratedError,
    PoisonEventError,
    TopicSafetyError,
    TransientStoreError,
)
from bridge.exits import EXIT_DB_LOGIN, EXIT_OK, EXIT_POISON, EXIT_UNSAFE, EXIT_USAGE
from bridge.kafka.access import BRIDGE_TOPICS, KafkaAccessError, delivery_refused, denied
from bridge.kafka.publisher import CLOSE_TIMEOUT_S, DeliveryFailure, Publisher
from bridge.kafka.topics import TopicChecker
from bridge.metrics import BridgeMetrics
from bridge.store import instances
from bridge.store.audit import requester
from bridge.store.dead_letters import DeadLetter
from bridge.store.instances import InstanceBoard
from bridge.store.invariants import OutboxDamagedError
from bridge.store.lease import Lease, LeaseStore
from bridge.store.reader import OutboxReader

log = logging.getLogger("bridge.daemon")


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
#: A transaction holding the horizon back this long is worth a warning; shorter ones are ordinary commits.
LONG_TRANSACTION_S = 10.0
#: How long a rewind waits for in-flight acks before it discards the producer.
REWIND_DRAIN_S = 10.0

#: What the daemon calls with each delivery report: (seq, generation, error or None).
OnDelivery = Callable[[int, int, KafkaError | None], None]
#: Each leadership term and each rebuild gets a new publisher, reporting deliveries to the daemon.
NewPublisher = Callable[[OnDelivery], Publisher]
#: A fenced write of the watermark that renews the lease: `Leadership.renew` or `renew_rewound`.
Renewal = Callable[..., None]
#: One retention pass: delete published rows older than the period; returns what it did.
RetentionPass = Callable[[timedelta], dict[str, Any]]


def _nothing() -> None:
    return None


def new_instance_id() -> str:
    """This process's name among the instances of a bridge name: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(slots=True)
class _Sent:
    """What the delivery report needs to know about a record in flight."""

    topic: str
    occurred_at: float


class BridgeDaemon:
    """The bridge's main loop for one bridge name; `run()` returns a process exit code.

    It is given everything it talks to: the lease store, a way to open the outbox reader and to make a
    publisher, the topic guard. `bridge.daemon.assemble.build_daemon` wires the real ones from the
    configuration; tests give it in-memory ones (`bridge.store.testing`, `bridge.kafka.testing`)."""

    def __init__(
        self,
        settings: LoopSection,
        topics: TopicSection,
        *,
        offsets: LeaseStore,
        open_reader: Callable[[], OutboxReader],
        new_publisher: NewPublisher,
        topic_guard: TopicChecker,
        startup: Sequence[StartupStep] = (),
        retention: RetentionSection | None = None,
        retention_pass: RetentionPass | None = None,
        producer_limit: int = PRODUCER_MAX_MESSAGE_BYTES,
        metrics: BridgeMetrics | None = None,
        instance_id: str | None = None,
        on_exit: Callable[[], None] = _nothing,
        instances: InstanceBoard | None = None,
        kafka_conf: Mapping[str, Any] = MappingProxyType({}),
        outbox: str = "",
    ) -> None:
        self.settings = settings
        self.metrics = metrics or BridgeMetrics()
        self.instance_id = instance_id or new_instance_id()
        self.offsets = offsets
        self.leadership = Leadership(offsets, self.instance_id, settings.lease_timeout_s, self.metrics)
        self._open_reader = open_reader
        self._make_publisher = new_publisher
        self._on_exit = on_exit
        self._kafka_conf = kafka_conf
        self._refusals = Refusals()
        self._denied: KafkaAccessError | None = None  # a Write the ACLs refused: stop, do not rebuild
        #: Dead letters sent and not yet on record: each is written with the first persist past its seq.
        self._dead_letters: list[DeadLetter] = []
        self._gate = PoisonGate(topics, settings.poison_policy, topic_guard, self.metrics, self._refusals,
                                producer_limit, on_dead_letter=self._dead_letters.append, outbox=outbox)
        #: Seqs at or below this were deleted before this bridge published them, and the operator accepted it
        #: (`--start-from`): gaps there are deleted rows, not rolled-back transactions.
        self._deleted_through = 0
        self.deleted_passed = 0
        self.metrics.dead_letter_alert_after_seconds.set(settings.dead_letter_alert_after_s)
        self._settled = SettledHoles()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._instances = instances
        self._startup = Startup(startup, self._stop, self.metrics, on_failing=self._report_failing)
        self._clock = StartupClock(self._ready)
        self.metrics.startup_seconds.set_function(self._clock.seconds)
        self.metrics.startup_alert_after_seconds.set(settings.startup_alert_after_s)
        #: Which part of starting the loop is in, for naming what keeps failing: the lease, the history, the lead.
        self._phase = "start-up"
        self._published: dict[str, Any] = {}  # topic -> its events_published child, looked up once
        self._published_pending: dict[str, int] = {}  # acks not yet added to events_published
        self._sent: dict[int, _Sent] = {}
        #: When the next outbox read may start: a read that found fewer rows than it asked for (the bridge has
        #: caught up) holds the next one back for `poll_interval_min_s`, so a trickle of commits is read a few
        #: rows at a time, not one query per row (`_lead`). 0 after a full read: a backlog reads at once.
        self._next_read_at = 0.0
        self.tracker: AckTracker | None = None
        self.last_error: str | None = None
        self.holes_settled = 0
        self.halted: PoisonEventError | None = None
        self.rewinds_applied = 0
        if (retention is None) != (retention_pass is None):
            raise ValueError("retention and retention_pass go together")
        self._retention = (
            Retention(retention, retention_pass, self.metrics, lambda: self.leadership.leading, self._stop,
                      self._note_error)
            if retention is not None and retention_pass is not None else None
        )

    # ------------------------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Ask the loop to stop gracefully (what SIGTERM and SIGINT do)."""
        self._stop.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def retention_passes(self) -> int:
        return self._retention.passes if self._retention is not None else 0

    def install_signal_handlers(self) -> None:
        def handler(signum: int, _: FrameType | None) -> None:
            log.info("signal received, stopping", extra={"signal": signal.Signals(signum).name})
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> int:
        """Check the outbox, wait for the lease, publish while holding it; return an exit code when stopped."""
        backoff = Backoff(BackoffPolicy(initial_s=0.2, cap_s=5.0))
        if self._retention is not None:
            self._retention.start()
        self._clock.restart()
        try:
            while not self._stop.is_set():
                try:
                    # Each check retried alone; refused Kafka credentials or certificate stop here, before the lease.
                    if not self._startup.run():
                        break
                    self._phase = "lease"
                    lease = self.leadership.acquire(self._stop, standing_by=self._ready,
                                                    on_standing_by=self._standing_by)
                    if lease is None:
                        break
                    self._phase = "history"
                    watermark = self._start(lease)
                    self._report_state(instances.LEADING)
                    self._phase = "lead"
                    code = self._lead(watermark)
                    if code != EXIT_OK or self._stop.is_set():
                        return code
                except FencedError as exc:
                    log.warning("lost the lease; standing by", extra={"error": str(exc)})
                    self.leadership.lost()
                except TransientStoreError as exc:
                    self.last_error = str(exc)
                    if self._phase in ("lease", "history"):
                        self._startup.failed(self._phase, exc)
                    if self._ready.is_set():
                        # Neither a healthy standby nor a leader until the database answers again.
                        self._ready.clear()
                        self._clock.restart()
                    delay = backoff.next_delay()
                    log.warning("database unavailable; retrying",
                                extra={"step": self._phase, "error": str(exc), "retry_in_s": delay})
                    self._stop.wait(delay)
                except TopicSafetyError as exc:
                    self.last_error = str(exc)
                    log.error("unsafe topic; stopping", extra={"error": str(exc)})
                    return EXIT_UNSAFE
                except OutboxDamagedError as exc:
                    self.last_error = str(exc)
                    log.error("the outbox's seq path is damaged; not publishing", extra={"error": str(exc)})
                    return EXIT_USAGE
                except (DatabaseLoginError, DatabaseTlsError) as exc:
                    # Retrying cannot help until someone fixes the URL, the role or the certificate, and a
                    # login retried at full speed can lock the account: stop, with a code that says why.
                    code = EXIT_DB_LOGIN if isinstance(exc, DatabaseLoginError) else EXIT_USAGE
                    self.last_error = str(exc)
                    log.error(str(exc), extra={"exit_code": code})
                    return code
                except NotMigratedError as exc:
                    # Not retried: no amount of waiting creates the tables.
                    self.last_error = str(exc)
                    log.error("the outbox database is not migrated; run `outbox-bridge migrate`",
                              extra={"error": str(exc)})
                    return EXIT_USAGE
                except KafkaAccessError as exc:
                    return self._access_refused(exc)
                except history.RowsGoneError as exc:
                    return self._refuse_to_lead(exc)
            return EXIT_OK
        finally:
            self._ready.clear()
            if self._instances is not None:
                self._instances.remove()
            self._on_exit()

    def _report_failing(self, failing: Failing) -> None:
        self._report_state(instances.STARTING, step=failing.step, attempts=failing.attempts, since=failing.since,
                           error=failing.error)

    def _standing_by(self) -> None:
        self._startup.failing = None
        self._report_state(instances.STANDING_BY)

    def _report_state(self, state: str, **details: Any) -> None:
        if self._instances is not None:
            self._instances.report(state, **details)

    def _start(self, lease: Lease) -> int:
        """The watermark this term starts from: the lease's, or where the operator said (`--start-from`) when
        rows above it are gone or the name is new or retired; RowsGoneError when nobody said."""
        found = self.offsets.history(lease.watermark)
        start = history.start_point(found, lease, self.settings.start_from,
                                    f"{requester()} via --start-from ({self.instance_id})")
        self._deleted_through = found.deleted.through_seq if found.deleted is not None else 0
        if start is None:
            return lease.watermark
        self.offsets.start_at(lease, start, self.settings.lease_timeout_s)
        return start.watermark

    def _refuse_to_lead(self, exc: history.RowsGoneError) -> int:
        """Say why on the record (`status`, `doctor`), give the lease up, and stop: waiting cannot help."""
        self.last_error = str(exc)
        log.error("refusing to lead: rows this bridge has not published are gone",
                  extra={"error": str(exc), "exit_code": exc.exit_code})
        lease = self.leadership.lease
        try:
            if lease is not None:
                self.offsets.persist(lease, lease.watermark, self.settings.lease_timeout_s,
                                     {"last_error": str(exc), "refused": "rows gone", "instance": self.instance_id})
                self.leadership.release()
        except (TransientStoreError, FencedError) as failed:
            log.warning("could not record the refusal", extra={"error": str(failed)})
        finally:
            self.leadership.lost()
        return exc.exit_code

    def _note_error(self, kind: str, exc: Exception) -> None:
        self.last_error = str(exc)
        self.metrics.publish_errors.labels(kind=kind).inc()

    # ---------------------------------------------------------------------------------------- lead

    def _lead(self, watermark: int) -> int:
        settings = self.settings
        tracker = AckTracker(watermark, max_in_flight=settings.max_in_flight,
                             max_in_flight_bytes=settings.max_in_flight_bytes)
        self.tracker = tracker
        self._sent.clear()
        # What another term sent but did not record, the leader that persisted past it recorded.
        self._dead_letters.clear()
        reader = self._open_reader()
        publisher = self._new_publisher()
        self._ready.set()
        checkpointed_at = time.monotonic()
        backoff = Backoff(BackoffPolicy(initial_s=0.05, cap_s=5.0))
        idle_min = settings.poll_interval_min_s
        idle_wait = idle_min
        try:
            while not self._stop.is_set():
                publisher.poll(0)
                self._flush_published()
                if publisher.failure is not None:
                    refused = self._refused(publisher.failure)
                    if refused is not None:
                        return self._shutdown(tracker, publisher, reader, self._access_refused(refused))
                    publisher = self._rebuild(publisher, tracker, reader)
                    continue
                # Checkpoint before reading: a process that was paused past its lease finds out here,
                # before it sends anything more.
                now = time.monotonic()
                if now - checkpointed_at >= settings.persist_interval_s or self.leadership.expired():
                    publisher = self._checkpoint(tracker, reader, publisher)
                    checkpointed_at = now
                read_any = False
                if now < self._next_read_at:
                    # Caught up: let the next rows gather; acks are still handled meanwhile.
                    publisher.poll(self._next_read_at - now)
                    continue
                if tracker.has_room(0):
                    try:
                        read_any = self._read_and_send(reader, tracker, publisher)
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
                        return self._halt(exc, tracker, publisher, reader)
                    except TopicSafetyError as exc:
                        self.last_error = str(exc)
                        log.error("unsafe topic; stopping", extra={"error": str(exc)})
                        return self._shutdown(tracker, publisher, reader, EXIT_UNSAFE)
                    except KafkaAccessError as exc:
                        return self._shutdown(tracker, publisher, reader, self._access_refused(exc))
                if read_any:
                    idle_wait = idle_min
                    continue
                if tracker.unacked_count:
                    # Waiting for acks: poll returns as soon as one arrives, so this costs no latency,
                    # and while Kafka is unreachable it keeps the loop from querying the outbox hot.
                    publisher.poll(idle_wait)
                else:
                    reader.wait(idle_wait)
                idle_wait = min(idle_wait * 2, settings.poll_interval_max_s)
            return self._shutdown(tracker, publisher, reader, EXIT_OK)
        except FencedError:
            self._flush_published()
            # Another instance may lead now: drop what is queued and in flight at once, wait for nothing.
            publisher.close(0)
            reader.close()
            raise
        except (DatabaseLoginError, DatabaseTlsError):
            # A new connection was refused mid-run: nothing can be persisted, so stop as at start. The lease
            # runs out and a standby with a working login takes over from the last persisted watermark.
            self._flush_published()
            publisher.close(0)
            reader.close()
            self.leadership.lost()
            raise

    def _checkpoint(self, tracker: AckTracker, reader: OutboxReader, publisher: Publisher) -> Publisher:
        """The periodic steps, in this order; a database failure skips the rest until the next turn."""
        given = publisher
        try:
            # 1. Rows that appeared in holes settled earlier: rewind to publish them (lowers the watermark).
            late = rewinds.late_rows(reader, self._settled, tracker.watermark)
            if late is not None:
                self.metrics.late_events.inc(len(late.late))
                publisher = self._rewind(late, tracker, reader, publisher)
            # 2. Persist the watermark and renew the lease, in one fenced write: after step 1's rewind, the
            #    watermark is lower than the one stored, and only `renew_rewound` may write it.
            self._persist(tracker, reader, self.leadership.renew if late is None else self.leadership.renew_rewound)
            # 3. An operator's rewind request, applied under the lease just renewed.
            requested = rewinds.requested(self.offsets, tracker.watermark)
            if requested is not None:
                publisher = self._rewind(requested, tracker, reader, publisher)
        except TransientStoreError as exc:
            self._note_error("database", exc)
            if self.leadership.expired():
                # Another instance may have taken over meanwhile: stop publishing.
                raise FencedError(f"could not renew the lease for {self.settings.lease_timeout_s}s") from exc
        except FencedError:
            if publisher is not given:
                # A rewind replaced the producer just before the lease turned out lost: the caller closes the
                # one it gave, so this one (nothing sent yet) is closed here, not left with its threads.
                publisher.close(0)
            raise
        return publisher

    def _new_publisher(self) -> Publisher:
        return self._make_publisher(self._on_delivery)

    def _refused(self, failure: DeliveryFailure) -> KafkaAccessError | None:
        """The access error a failed delivery means (no ACL, credentials or certificate refused), if any:
        re-sending would fail the same way, so the loop stops instead of rebuilding."""
        if self._denied is not None:
            return self._denied
        sent = self._sent.get(failure.seq) if failure.seq is not None else None
        topic = sent.topic if sent is not None else None
        return delivery_refused(failure.code, failure.reason, self._kafka_conf, topic)

    def _access_refused(self, exc: KafkaAccessError) -> int:
        self.last_error = str(exc)
        self.metrics.publish_errors.labels(kind=type(exc).__name__).inc()
        log.error("Kafka refused the bridge; stopping (retrying cannot fix this)",
                  extra={"error": str(exc), "exit_code": exc.exit_code})
        return exc.exit_code

    def _rebuild(self, publisher: Publisher, tracker: AckTracker, reader: OutboxReader) -> Publisher:
        failure = publisher.failure
        assert failure is not None
        self.last_error = f"delivery of seq {failure.seq} failed: {failure.reason}"
        self.metrics.publish_errors.labels(kind="fatal" if failure.fatal else "delivery").inc()
        self.metrics.producer_rebuilds.inc()
        log.error("delivery failed; rebuilding the producer and rewinding to the watermark",
                  extra={"seq": failure.seq, "error": failure.reason, "watermark": tracker.watermark,
                         "suspect_seqs": self._refusals.suspects[:10], "refused_seqs": self._refusals.culprits})
        # Finished for good before anything is sent again, so nothing it sent lands after the re-sends; its
        # last reports still count (acks move the watermark, refusals name suspects). Bounded well inside
        # the lease, which is not renewed meanwhile.
        publisher.close(min(CLOSE_TIMEOUT_S, self.settings.lease_timeout_s / 2))
        return self._restart_from(tracker.watermark, tracker, reader)

    def _passed_deleted(self, gap: SeqRange) -> int:
        """Count the part of a settled gap that cleanup deleted (accepted with `--start-from`); return its size."""
        deleted = min(gap.last, self._deleted_through) - gap.first + 1
        self.deleted_passed += deleted
        log.warning("passed over seqs deleted before this bridge published them (accepted with --start-from)",
                    extra={"first": gap.first, "last": min(gap.last, self._deleted_through)})
        return deleted

    def _restart_from(self, watermark: int, tracker: AckTracker, reader: OutboxReader) -> Publisher:
        """Forget everything in flight, continue reading after `watermark`, with a new producer."""
        self._dead_letters[:] = [letter for letter in self._dead_letters if letter.seq <= watermark]
        tracker.reset(watermark)
        self._sent.clear()
        self._refusals.restart()
        reader.forget_holes()
        self._settled.forget_from(watermark + 1)
        return self._new_publisher()

    def _rewind(self, rewind: rewinds.Rewind, tracker: AckTracker, reader: OutboxReader,
                publisher: Publisher) -> Publisher:
        """Carry out a rewind: drain (bounded, well inside the lease), discard the producer, continue
        after `rewind.to` once the lower watermark is stored under this lease."""
        self._drain(tracker, publisher,
                    min(REWIND_DRAIN_S, self.settings.shutdown_timeout_s, self.settings.lease_timeout_s / 4))
        publisher.close()
        resume_at = rewind.to
        request = rewind.request
        if request is not None:
            resume_at = tracker.watermark  # if the request cannot be applied now, carry on from here
            lease = self.leadership.lease
            assert lease is not None
            try:
                applied = self.offsets.apply_rewind(lease, request, self.settings.lease_timeout_s)
            except TransientStoreError as exc:
                self._note_error("database", exc)
                log.warning("could not apply the rewind request now; retrying at the next persist",
                            extra={"request": request.id, "error": str(exc)})
                applied = False
            else:
                if not applied:
                    log.warning("rewind request no longer pending; ignored", extra={"request": request.id})
            if applied:
                resume_at = rewind.to
                self.rewinds_applied += 1
                log.info("rewound", extra={"request": request.id, "watermark": rewind.to})
        publisher = self._restart_from(resume_at, tracker, reader)
        self.metrics.watermark_seq.set(tracker.watermark)
        return publisher

    # ---------------------------------------------------------------------------------------- read

    def _read_and_send(self, reader: OutboxReader, tracker: AckTracker, publisher: Publisher) -> bool:
        """Read after the tracker's position (the one cursor) and send what the read allows, in seq order.

        The tracker takes exactly the holes the reader settled and refuses any other gap. Stopping early
        (the window is full, a suspect record must go alone) needs no rewind: the next read starts after
        the last seq the tracker accounted for.
        """
        limit = min(self.settings.read_batch_size, self.settings.max_in_flight - tracker.in_flight_count)
        if limit <= 0 or self._refusals.alone is not None:
            return False
        started = time.monotonic()
        batch = reader.poll(tracker.position, limit)
        caught_up = len(batch.rows) < limit
        self._next_read_at = started + self.settings.poll_interval_min_s if caught_up else 0.0
        self.metrics.horizon_held_back.set(1 if batch.waiting_on is not None else 0)
        if not batch.rows:
            return False
        generation = tracker.generation
        sent_any = False
        try:
            for row in batch.in_order():
                if isinstance(row, SeqRange):
                    holes = tracker.settle(row)
                    self._settled.add(row)
                    if row.first <= self._deleted_through:
                        holes -= self._passed_deleted(row)
                    self.holes_settled += holes
                    self.metrics.holes_settled.inc(holes)
                    continue
                alone = self._refusals.must_go_alone(row.seq)
                if alone and tracker.unacked_count:
                    break  # send it once everything before it is acknowledged
                if not tracker.has_room(len(row.payload)):
                    break  # the byte window is full: the rest is read again once acks make room
                record = self._gate.record_for(row)
                if not self.leadership.may_send():
                    # Checked before every send: a read, a topic check or a pause may have outlasted
                    # the lease, and a standby may lead by now.
                    raise FencedError(f"the lease ran out before seq {row.seq} was sent; standing down")
                tracker.track(row.seq, record.size)
                self._sent[row.seq] = _Sent(record.topic, row.occurred_at.timestamp())
                publisher.send(record, generation)
                sent_any = True
                if alone:
                    self._refusals.alone = row.seq
                    break  # and nothing after it until it is acknowledged
            return sent_any
        finally:
            self.metrics.in_flight_events.set(tracker.in_flight_count)
            self.metrics.in_flight_bytes.set(tracker.in_flight_bytes)

    # ------------------------------------------------------------------------------------ delivery

    def _on_delivery(self, seq: int, generation: int, err: KafkaError | None) -> None:
        tracker = self.tracker
        if tracker is None or generation != tracker.generation:
            return
        if err is not None:
            self.metrics.publish_errors.labels(kind=err.name()).inc()
            if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and self._denied is None:
                sent = self._sent.get(seq)
                topic = sent.topic if sent is not None else BRIDGE_TOPICS
                self._denied = denied(self._kafka_conf, "Write", f"topic {topic}", err.name())
            if err.code() in RECORD_REFUSED:
                self._refusals.refused(seq, f"{err.name()}: {err.str()}")
                sent = self._sent.get(seq)
                if sent is not None:
                    self._gate.recheck(sent.topic)
            return
        sent = self._sent.pop(seq, None)
        self._refusals.delivered(seq)
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

    def _status(self, tracker: AckTracker, reader: OutboxReader) -> dict[str, Any]:
        since = self.leadership.since
        return report(tracker, reader, self.metrics, instance=self.instance_id, holes_settled=self.holes_settled,
                      rewinds_applied=self.rewinds_applied, last_error=self.last_error,
                      leading_since=since.isoformat(timespec="seconds") if since else None)

    def _persist(self, tracker: AckTracker, reader: OutboxReader, renew: Renewal) -> None:
        status = self._status(tracker, reader)
        age = holder_age_s(status["horizon_holder"])
        if age is not None and age >= LONG_TRANSACTION_S:
            log.warning("a long transaction holds publishing back", extra={"holder": status["horizon_holder"]})
        self._renew(renew, tracker.watermark, status)
        self._report_dead_letters()

    def _renew(self, renew: Renewal, watermark: int, status: dict[str, Any]) -> None:
        """Persist and renew (`Leadership.renew`, or `renew_rewound` after a late-row rewind), recording the dead
        letters the watermark passes in the same write."""
        passed = [letter for letter in self._dead_letters if letter.seq <= watermark]
        renew(watermark, status, dead_letters=passed)
        if passed:
            self._dead_letters[:] = [letter for letter in self._dead_letters if letter.seq > watermark]
            log.info("dead letters on record", extra={"seqs": [letter.seq for letter in passed][:20]})

    def _report_dead_letters(self) -> None:
        """The open dead letters of this name on their gauges: operators resolve them from the CLI."""
        found = self.offsets.open_dead_letters()
        self.metrics.dead_letters_open.set(found.count)
        age = (datetime.now(UTC) - found.oldest_at).total_seconds() if found.oldest_at is not None else 0.0
        self.metrics.dead_letter_oldest_age_seconds.set(max(0.0, age))

    # ------------------------------------------------------------------------------------ stopping

    def _drain(self, tracker: AckTracker, publisher: Publisher, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.settings.shutdown_timeout_s if timeout is None else timeout)
        while tracker.unacked_count and time.monotonic() < deadline and publisher.failure is None:
            publisher.poll(0.05)

    def _shutdown(self, tracker: AckTracker, publisher: Publisher, reader: OutboxReader, code: int,
                  halted_at: PoisonEventError | None = None) -> int:
        """Stop reading, wait (bounded) for in-flight acks, persist the watermark, give up the lease."""
        log.info("stopping: waiting for in-flight deliveries",
                 extra={"unacked": tracker.unacked_count, "timeout_s": self.settings.shutdown_timeout_s})
        self._drain(tracker, publisher)
        self._flush_published()
        if tracker.unacked_count:
            log.warning("stopped with deliveries unconfirmed; they will be re-sent after restart",
                        extra={"unacked": tracker.unacked_count, "watermark": tracker.watermark})
        publisher.close()
        try:
            status = self._status(tracker, reader)
            if halted_at is not None:
                status["halted_at_seq"] = halted_at.seq
            self._renew(self.leadership.renew, tracker.watermark, status)
            self.leadership.release()
        except (TransientStoreError, FencedError) as exc:
            # Still exit with the code that says why we stopped; the only cost is duplicates after a restart.
            self.last_error = str(exc)
            log.error("could not persist the final watermark; a restart re-sends from the last persisted one",
                      extra={"watermark": tracker.watermark, "error": str(exc)})
        finally:
            reader.close()
            self.leadership.lost()
        log.info("stopped", extra={"watermark": tracker.watermark, "exit_code": code})
        return code

    def _halt(self, exc: PoisonEventError, tracker: AckTracker, publisher: Publisher, reader: OutboxReader) -> int:
        """Poison policy `halt`: publish everything before the bad row, persist, and stop naming it."""
        self.halted = exc
        self.last_error = str(exc)
        log.error("halting on a poison event; fix or remove the row, or run with BRIDGE_POISON_POLICY=dead-letter",
                  extra={"seq": exc.seq, "reason": exc.reason})
        return self._shutdown(tracker, publisher, reader, EXIT_POISON, halted_at=exc)
