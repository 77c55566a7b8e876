"""The bridge's loop: start up, take the lease, lead one term under it, and again, until stopped.

Start-up checks first, each retried alone (`startup`); then stand by until the lease is free and take it
(`leadership`); learn where to start (`history`); then a `Term` publishes under the lease and says how it
ended. A lost lease stands by again; a database failure backs off and retries; what retrying cannot fix
(a refused login or certificate, an unsafe topic, a damaged outbox, a poison event under `halt`) stops the
process with its exit code (`bridge.exits`). The loop also keeps what outlives a term: readiness, the
instance's row on the board, retention, and the tally `status` and `/healthz` read.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import FrameType, MappingProxyType
from typing import Any

from bridge.backoff import Backoff, BackoffPolicy
from bridge.config import LoopSection, RetentionSection, TopicSection
from bridge.core.late import SettledHoles
from bridge.core.refusals import Refusals
from bridge.core.watermark import AckTracker
from bridge.daemon import history
from bridge.daemon.ending import Ending
from bridge.daemon.leadership import Leadership
from bridge.daemon.persisting import Persisting
from bridge.daemon.poison import PRODUCER_MAX_MESSAGE_BYTES, PoisonGate
from bridge.daemon.retention import Retention
from bridge.daemon.startup import Failing, Startup, StartupClock, StartupStep
from bridge.daemon.tally import Tally
from bridge.daemon.term import Term
from bridge.daemon.term_parts import NewPublisher, TermParts
from bridge.errors import (
    DatabaseLoginError,
    DatabaseTlsError,
    FencedError,
    NotMigratedError,
    PoisonEventError,
    SchemaRegistryRefusedError,
    TopicSafetyError,
    TransientStoreError,
)
from bridge.exits import EXIT_DB_LOGIN, EXIT_OK, EXIT_UNSAFE, EXIT_USAGE
from bridge.kafka.access import KafkaAccessError
from bridge.kafka.topics import TopicChecker
from bridge.metrics import BridgeMetrics
from bridge.schemas.values import SchemaValues
from bridge.store import instances
from bridge.store.audit import requester
from bridge.store.instances import InstanceBoard
from bridge.store.invariants import OutboxDamagedError
from bridge.store.lease import Lease, LeaseStore
from bridge.store.reader import OutboxReader

log = logging.getLogger("bridge.daemon")

#: One retention pass: delete published rows older than the period; returns what it did.
RetentionPass = Callable[[timedelta], dict[str, Any]]


def _nothing() -> None:
    return None


def new_instance_id() -> str:
    """This process's name among the instances of a bridge name: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


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
        values: SchemaValues | None = None,
        committed: Callable[[int], int | None] | None = None,
        checkpoint_worker: bool = False,
    ) -> None:
        if (retention is None) != (retention_pass is None):
            raise ValueError("retention and retention_pass go together")
        self.settings = settings
        self.metrics = metrics or BridgeMetrics()
        self.instance_id = instance_id or new_instance_id()
        self.offsets = offsets
        self.leadership = Leadership(offsets, self.instance_id, settings.lease_timeout_s, self.metrics)
        self._open_reader = open_reader
        self._on_exit = on_exit
        self._instances = instances
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._tally = Tally(self.metrics)
        persisting = Persisting(self.leadership, offsets, self.metrics, self._tally, self.instance_id,
                                delivery="at-least-once" if committed is None else "exactly-once")
        refusals = Refusals()
        self._parts = TermParts(
            settings=settings, instance_id=self.instance_id, leadership=self.leadership, offsets=offsets,
            new_publisher=new_publisher,
            gate=PoisonGate(topics, settings.poison_policy, topic_guard, self.metrics, refusals, producer_limit,
                            on_dead_letter=persisting.dead_letter_sent, outbox=outbox, values=values),
            refusals=refusals, settled=SettledHoles(), persisting=persisting, tally=self._tally,
            metrics=self.metrics, stop=self._stop, kafka_conf=kafka_conf, committed=committed,
            checkpoint_worker=checkpoint_worker,
        )
        #: Seqs at or below this were deleted before this bridge published them, and the operator accepted it
        #: (`--start-from`): gaps there are deleted rows, not rolled-back transactions.
        self._deleted_through = 0
        self._term: Term | None = None
        self.halted: PoisonEventError | None = None
        self.metrics.dead_letter_alert_after_seconds.set(settings.dead_letter_alert_after_s)
        self._startup = Startup(startup, self._stop, self.metrics, on_failing=self._report_failing)
        self._clock = StartupClock(self._ready)
        self.metrics.startup_seconds.set_function(self._clock.seconds)
        self.metrics.startup_alert_after_seconds.set(settings.startup_alert_after_s)
        #: Which part of starting the loop is in, for naming what keeps failing: the lease, the history, the lead.
        self._phase = "start-up"
        self._retention = (
            Retention(retention, retention_pass, self.metrics, lambda: self.leadership.leading, self._stop,
                      self._tally.error)
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

    @property
    def tracker(self) -> AckTracker | None:
        """The ack tracker of the current (or last) term; None before the first."""
        return self._term.tracker if self._term is not None else None

    @property
    def last_error(self) -> str | None:
        return self._tally.last_error

    @property
    def holes_settled(self) -> int:
        return self._tally.holes_settled

    @property
    def rewinds_applied(self) -> int:
        return self._tally.rewinds_applied

    @property
    def deleted_passed(self) -> int:
        return self._tally.deleted_passed

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
        tally = self._tally
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
                    ending = self._lead(watermark)
                    if ending.code is None:
                        self._lost(ending.why)
                    elif ending.code != EXIT_OK or self._stop.is_set():
                        return ending.code
                except FencedError as exc:
                    self._lost(str(exc))
                except TransientStoreError as exc:
                    tally.last_error = str(exc)
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
                    tally.last_error = str(exc)
                    log.error("unsafe topic; stopping", extra={"error": str(exc)})
                    return EXIT_UNSAFE
                except OutboxDamagedError as exc:
                    tally.last_error = str(exc)
                    log.error("the outbox's seq path is damaged; not publishing", extra={"error": str(exc)})
                    return EXIT_USAGE
                except (DatabaseLoginError, DatabaseTlsError) as exc:
                    # Retrying cannot help until someone fixes the URL, the role or the certificate, and a
                    # login retried at full speed can lock the account: stop, with a code that says why.
                    code = EXIT_DB_LOGIN if isinstance(exc, DatabaseLoginError) else EXIT_USAGE
                    tally.last_error = str(exc)
                    log.error(str(exc), extra={"exit_code": code})
                    return code
                except SchemaRegistryRefusedError as exc:
                    # At start-up, with json-schema values: a refused login or a URL that is no registry's API.
                    tally.last_error = str(exc)
                    log.error("the schema registry refused the bridge; not leading", extra={"error": str(exc)})
                    return EXIT_USAGE
                except NotMigratedError as exc:
                    # Not retried: no amount of waiting creates the tables.
                    tally.last_error = str(exc)
                    log.error("the outbox database is not migrated; run `outbox-bridge migrate`",
                              extra={"error": str(exc)})
                    return EXIT_USAGE
                except KafkaAccessError as exc:
                    return tally.refused(exc)
                except history.RowsGoneError as exc:
                    return self._refuse_to_lead(exc)
            return EXIT_OK
        finally:
            self._ready.clear()
            if self._instances is not None:
                self._instances.remove()
            self._on_exit()

    def new_term(self, watermark: int, reader: OutboxReader) -> Term:
        """A term of this instance from `watermark`, reading with `reader`: the loop makes one per lease."""
        return Term(self._parts, watermark, reader, self._deleted_through)

    def _lead(self, watermark: int) -> Ending:
        self._term = term = self.new_term(watermark, self._open_reader())
        self._ready.set()
        ending = term.run()
        if ending.halted is not None:
            self.halted = ending.halted
        return ending

    def _lost(self, why: str) -> None:
        log.warning("lost the lease; standing by", extra={"error": why})
        self.leadership.lost()

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
        self._tally.last_error = str(exc)
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
