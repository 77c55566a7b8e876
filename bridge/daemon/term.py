"""One leadership term: from the lease taken to the lease lost or given up, publish the outbox in seq order.

The loop (`bridge.daemon.loop`) makes a `Term` for each lease it takes, once it knows where to start. The
term has its own ack tracker (the one cursor), reader, producer and records in flight; `run()` turns until
it is asked to stop, the lease is lost, or something retrying cannot fix happens, and returns how it ended
(an `Ending`, with the exit code) instead of calling back into the loop.

Exactly-once (`parts.committed` set): deliveries are reported once their transaction committed; see `exactly_once`.

One thread: serve delivery reports, checkpoint on an interval (late rows, persist and renew, rewind
requests; their statements on a worker thread, `checkpoints`), read while the in-flight window has room, and
wait for new rows when idle. A failed delivery discards the producer and rewinds to the watermark; a failed
read or topic check backs off and retries.
"""

from __future__ import annotations

import logging
import time
from functools import partial

from bridge.backoff import Backoff, BackoffPolicy
from bridge.core.holes import SeqRange
from bridge.core.watermark import AckTracker
from bridge.daemon import exactly_once, rewinds, step_failures
from bridge.daemon.checkpoints import Checkpoints, look
from bridge.daemon.ending import STOPPED, Ending
from bridge.daemon.in_flight import InFlight
from bridge.daemon.pace import ReadPace
from bridge.daemon.term_parts import TermParts
from bridge.errors import (
    DatabaseLoginError,
    DatabaseTlsError,
    FencedError,
    TransientStoreError,
)
from bridge.exits import EXIT_FENCED
from bridge.kafka.publisher import CLOSE_TIMEOUT_S, Publisher
from bridge.kafka.transactional import is_fenced
from bridge.store.reader import OutboxReader

log = logging.getLogger("bridge.daemon")

#: How long a rewind waits for in-flight acks before it discards the producer.
REWIND_DRAIN_S = 10.0


class Term:
    """One term under one lease, from `watermark`: `run()` publishes until it ends and says how."""

    def __init__(self, parts: TermParts, watermark: int, reader: OutboxReader, deleted_through: int = 0) -> None:
        settings = self.settings = parts.settings
        self.leadership = parts.leadership
        self.reader = reader
        self.tracker = AckTracker(watermark, max_in_flight=settings.max_in_flight,
                                  max_in_flight_bytes=settings.max_in_flight_bytes)
        self.in_flight = InFlight(self.tracker, parts.refusals, parts.gate, parts.metrics, parts.kafka_conf)
        self._parts = parts
        self._tally = parts.tally
        self._metrics = parts.metrics
        self._refusals = parts.refusals
        self._settled = parts.settled
        self._persisting = parts.persisting
        # What another term sent but did not record, the leader that persisted past it recorded.
        self._persisting.forget_dead_letters()
        #: Seqs at or below this were deleted before this bridge published them, and the operator accepted it
        #: (`--start-from`): gaps there are deleted rows, not rolled-back transactions.
        self._deleted_through = deleted_through
        self._pace = ReadPace(settings.poll_interval_min_s)
        self._checkpoints = Checkpoints(
            settings, time.monotonic(), self.leadership.expired, self._checkpoint, self._tally.error,
            # The statements the worker runs; the settled holes are taken in the loop, which changes them.
            look=lambda: partial(look, self.reader, self._settled.recent(), self._renew, parts.offsets.pending_rewind),
            worker=parts.checkpoint_worker)
        self.publisher = self._new_publisher()
        #: Exactly-once: what Kafka committed is still to be asked, after the new producer fenced its predecessors.
        self._resume_pending = parts.committed is not None

    def run(self) -> Ending:
        settings = self.settings
        tracker = self.tracker
        backoff = Backoff(BackoffPolicy(initial_s=0.05, cap_s=5.0))
        idle_min = settings.poll_interval_min_s
        idle_wait = idle_min
        try:
            while not self._parts.stop.is_set():
                self.publisher.poll(0)
                self.in_flight.flush_published()
                if (failure := self.publisher.failure) is not None:
                    if self._parts.committed is not None:  # exactly-once only
                        self._checkpoints.finish()  # its renewal and this one, one after the other
                        # Raises FencedError if another instance leads. Renewed before every rebuild: the new
                        # producer's init_transactions may block half the lease (a coordinator still loading).
                        exactly_once.confirm_lease(self._renew, self.leadership.expired, self._tally.error,
                                                   failure.reason if is_fenced(failure) else None)
                    refused = self.in_flight.refusal(failure)
                    if refused is not None:
                        return self._shutdown(step_failures.ending(self._tally, refused))
                    self._rebuild()
                    continue
                # Checkpoint before reading: a process that was paused past its lease finds out here,
                # before it sends anything more.
                now = time.monotonic()
                self._checkpoints.turn(now)
                read_any = False
                if now < self._pace.next_read_at:
                    # Caught up: let the next rows gather; acks are still handled meanwhile.
                    self._pace.wait(self.publisher, self._pace.next_read_at - now)
                    continue
                if tracker.has_room(0):
                    try:
                        read_any = self._read_and_send()
                        backoff.reset()
                    except step_failures.RETRIED as exc:
                        # Nothing is lost: the next read starts after the last seq handed to Kafka.
                        self.publisher.poll(step_failures.retried(self._tally, exc, backoff.next_delay()))
                    except step_failures.ENDING as exc:
                        return self._shutdown(step_failures.ending(self._tally, exc))
                if read_any:
                    idle_wait = idle_min
                    continue
                if tracker.unacked_count:
                    # Waiting for acks: poll returns as soon as one arrives, so this costs no latency,
                    # and while Kafka is unreachable it keeps the loop from querying the outbox hot.
                    self._pace.wait(self.publisher, idle_wait)
                else:
                    self.reader.wait(idle_wait)
                idle_wait = min(idle_wait * 2, settings.poll_interval_max_s)
            return self._shutdown(STOPPED)
        except FencedError as exc:
            self._checkpoints.close()
            self.in_flight.flush_published()
            # Another instance may lead now: drop what is queued and in flight at once, wait for nothing.
            self.publisher.close(0)
            self.reader.close()
            if self._parts.committed is None:
                return Ending(None, str(exc))  # at-least-once: stand by again
            # Exactly-once: the new leader's producer fences this one (its open transaction is aborted), so exit
            # and be started again as a standby with a fresh producer.
            log.error("fenced: another instance leads this bridge name; what this one had queued is aborted by "
                      "the broker, never visible to read_committed consumers; exiting", extra={"error": str(exc)})
            return Ending(EXIT_FENCED, f"fenced: {exc}")
        except (DatabaseLoginError, DatabaseTlsError):
            # A new connection was refused mid-run: nothing can be persisted, so stop as at start. The lease
            # runs out and a standby with a working login takes over from the last persisted watermark.
            self._checkpoints.close()
            self.in_flight.flush_published()
            self.publisher.close(0)
            self.reader.close()
            self.leadership.lost()
            raise
        finally:
            self._checkpoints.close()  # done already, unless something unforeseen ended the term

    # ------------------------------------------------------------------------------------ checkpoint

    def _checkpoint(self) -> None:
        """The periodic steps, in this order; a database failure skips the rest until the next turn."""
        try:
            # 1. Rows that appeared in holes settled earlier: rewind to publish them (lowers the watermark).
            late = rewinds.late_rows(self.reader, self._settled, self.tracker.watermark)
            if late is not None:
                self._metrics.late_events.inc(len(late.late))
                self._rewind(late)
            # 2. Persist the watermark and renew the lease, in one fenced write: after step 1's rewind, the
            #    watermark is lower than the one stored, and only `renew_rewound` may write it.
            renew = self.leadership.renew if late is None else self.leadership.renew_rewound
            self._persisting.persist(renew, self.tracker, self.reader)
            # 3. An operator's rewind request, applied under the lease just renewed.
            requested = rewinds.requested(self._parts.offsets, self.tracker.watermark)
            if requested is not None:
                self._rewind(requested)
        except TransientStoreError as exc:
            self._checkpoints.failed(exc)

    def _renew(self) -> None:
        self._persisting.persist(self.leadership.renew, self.tracker, self.reader)

    # ------------------------------------------------------------------------------ rebuild, rewind

    def _new_publisher(self) -> Publisher:
        return self._parts.new_publisher(self.in_flight.report)

    def _rebuild(self) -> None:
        publisher = self.publisher
        failure = publisher.failure
        assert failure is not None
        tracker = self.tracker
        self._metrics.publish_errors.labels(kind="fatal" if failure.fatal else "delivery").inc()
        self._metrics.producer_rebuilds.inc()
        self._tally.last_error = exactly_once.log_rebuild(failure, len(self.in_flight), tracker.watermark,
                                                          self._refusals.suspects[:10], self._refusals.culprits)
        # Finished for good before anything is sent again, so nothing it sent lands after the re-sends; its
        # last reports still count (acks move the watermark, refusals name suspects). Bounded well inside
        # the lease, which is not renewed meanwhile.
        publisher.close(min(CLOSE_TIMEOUT_S, self.settings.lease_timeout_s / 2))
        self._restart_from(tracker.watermark)
        # A commit reported failed may have succeeded all the same (its answer was lost): ask Kafka.
        self._resume_pending = self._parts.committed is not None

    def _restart_from(self, watermark: int, publisher: Publisher | None = None) -> None:
        """Forget everything in flight, continue reading after `watermark`, with a new producer (`publisher`, or
        one made now)."""
        self._persisting.forget_dead_letters(above=watermark)
        self.tracker.reset(watermark)
        self.in_flight.forget()
        self._refusals.restart()
        self.reader.forget_holes()
        self._settled.forget_from(watermark + 1)
        self.publisher = publisher if publisher is not None else self._new_publisher()

    def _rewind(self, rewind: rewinds.Rewind) -> None:
        """Carry out a rewind: drain (bounded, well inside the lease), discard the producer, continue
        after `rewind.to` once the lower watermark is stored under this lease.

        Exactly-once: Kafka's progress is lowered first (`exactly_once`); if it cannot be, nothing is rewound
        now, and a request or the late rows are taken up at the next checkpoint."""
        settings = self.settings
        self._drain(min(REWIND_DRAIN_S, settings.shutdown_timeout_s, settings.lease_timeout_s / 4))
        self.publisher.close()
        publisher = None
        if self._parts.committed is not None:
            publisher = self._new_publisher()
            if not exactly_once.mark_rewind(publisher, rewind.to, self.tracker.watermark):
                self._restart_from(self.tracker.watermark, publisher)
                return
        resume_at = rewind.to
        if rewind.request is not None:
            lease = self.leadership.lease
            assert lease is not None
            if rewinds.apply(self._parts.offsets, lease, rewind, settings.lease_timeout_s, self._tally.error):
                self._tally.rewinds_applied += 1
            else:
                resume_at = self.tracker.watermark  # the request cannot be applied now: carry on from here
        self._restart_from(resume_at, publisher)
        self._metrics.watermark_seq.set(self.tracker.watermark)

    # ---------------------------------------------------------------------------------------- read

    def _read_and_send(self) -> bool:
        """Read after the tracker's position (the one cursor) and send what the read allows, in seq order.

        The tracker takes exactly the holes the reader settled and refuses any other gap. Stopping early
        (the window is full, a suspect record must go alone) needs no rewind: the next read starts after
        the last seq the tracker accounted for.
        """
        if self._resume_pending:
            self._resume_after_committed()
        settings, tracker, refusals, metrics = self.settings, self.tracker, self._refusals, self._metrics
        limit = min(settings.read_batch_size, settings.max_in_flight - tracker.in_flight_count)
        if limit <= 0 or refusals.alone is not None:
            return False
        started = time.monotonic()
        batch = self.reader.poll(tracker.position, limit)
        caught_up = len(batch.rows) < limit
        self._pace.read(started, caught_up)
        metrics.horizon_held_back.set(1 if batch.waiting_on is not None else 0)
        if not batch.rows:
            return False
        generation = tracker.generation
        publisher = self.publisher
        sent_any = False
        try:
            for row in batch.in_order():
                if isinstance(row, SeqRange):
                    holes = tracker.settle(row)
                    self._settled.add(row)
                    if row.first <= self._deleted_through:
                        holes -= self._passed_deleted(row)
                    self._tally.holes_settled += holes
                    metrics.holes_settled.inc(holes)
                    continue
                alone = refusals.must_go_alone(row.seq)
                if alone and tracker.unacked_count:
                    break  # send it once everything before it is acknowledged
                if not tracker.has_room(len(row.payload)):
                    break  # the byte window is full: the rest is read again once acks make room
                record = self._parts.gate.record_for(row)
                if not self.leadership.may_send():
                    # Checked before every send: a read, a topic check or a pause may have outlasted
                    # the lease, and a standby may lead by now.
                    raise FencedError(f"the lease ran out before seq {row.seq} was sent; standing down")
                self.in_flight.track(row, record)
                publisher.send(record, generation)
                sent_any = True
                if alone:
                    refusals.alone = row.seq
                    break  # and nothing after it until it is acknowledged
            return sent_any
        finally:
            self._pace.sent(sent_any)
            metrics.in_flight_events.set(tracker.in_flight_count)
            metrics.in_flight_bytes.set(tracker.in_flight_bytes)

    def _resume_after_committed(self) -> None:
        """Exactly-once: continue after what Kafka committed, if ahead (`exactly_once.committed_ahead`). A
        KafkaException leaves it pending, retried as a failed read is."""
        assert self._parts.committed is not None
        ahead = exactly_once.committed_ahead(self._parts.committed, self.tracker.watermark)
        self._resume_pending = False
        if ahead is not None:
            self.tracker.reset(ahead)
            self.reader.forget_holes()

    def _passed_deleted(self, gap: SeqRange) -> int:
        """Count the part of a settled gap that cleanup deleted (accepted with `--start-from`); return its size."""
        deleted = min(gap.last, self._deleted_through) - gap.first + 1
        self._tally.deleted_passed += deleted
        log.warning("passed over seqs deleted before this bridge published them (accepted with --start-from)",
                    extra={"first": gap.first, "last": min(gap.last, self._deleted_through)})
        return deleted

    # ------------------------------------------------------------------------------------ stopping

    def _drain(self, timeout: float | None = None) -> None:
        tracker, publisher = self.tracker, self.publisher
        deadline = time.monotonic() + (self.settings.shutdown_timeout_s if timeout is None else timeout)
        while tracker.unacked_count and time.monotonic() < deadline and publisher.failure is None:
            publisher.poll(0.05)

    def _shutdown(self, ending: Ending) -> Ending:
        """Stop reading, wait (bounded) for in-flight acks, persist the watermark, give up the lease."""
        tracker = self.tracker
        self._checkpoints.close()
        log.info("stopping: waiting for in-flight deliveries",
                 extra={"unacked": tracker.unacked_count, "timeout_s": self.settings.shutdown_timeout_s})
        self._drain()
        self.in_flight.flush_published()
        if tracker.unacked_count:
            log.warning("stopped with deliveries unconfirmed; they will be re-sent after restart",
                        extra={"unacked": tracker.unacked_count, "watermark": tracker.watermark})
        self.publisher.close()
        try:
            status = self._persisting.status(tracker, self.reader)
            if ending.halted is not None:
                status["halted_at_seq"] = ending.halted.seq
            self._persisting.renew(self.leadership.renew, tracker.watermark, status)
            self.leadership.release()
        except (TransientStoreError, FencedError) as exc:
            # Still exit with the code that says why we stopped; the only cost is duplicates after a restart.
            self._tally.last_error = str(exc)
            log.error("could not persist the final watermark; a restart re-sends from the last persisted one",
                      extra={"watermark": tracker.watermark, "error": str(exc)})
        finally:
            self.reader.close()
            self.leadership.lost()
        log.info("stopped", extra={"watermark": tracker.watermark, "exit_code": ending.code})
        return ending

