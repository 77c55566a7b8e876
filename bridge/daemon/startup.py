"""Start-up: what a bridge checks before it stands by or leads, each step retried on its own.

A start-up that needs a long run of round trips in a row, and starts all over when one fails, never
completes on a link that fails often, although the read loop, which retries each read alone, would run
fine on it. So each step (the schema revision, the never-skip seq path, the login's rights, Kafka, and with
json-schema values the schema registry) runs on its own connection, is retried alone with backoff when the
database or the registry fails, and once passed stays passed for this start. Errors that waiting cannot fix
(not migrated, a damaged seq path, a refused login or certificate) are not retried: the loop turns them into
exit codes.

The step that keeps failing is named, never hidden behind a retry loop: in the log (the step, how many
attempts, since when, the error), on `outbox_startup_failures_total{step}` and `outbox_startup_seconds`,
and on the instance's row in `bridge_instances`, which `status` and `doctor` read.

A bridge that cannot start does not exit after a bound: an orchestrator's restart would not mend a failing
link or database, and its back-off would delay the start once they recover, while this loop starts within
five seconds of it. The OutboxBridgeNotStarting alert (`BRIDGE_STARTUP_ALERT_AFTER`) is what tells a person.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from bridge.backoff import Backoff, BackoffPolicy
from bridge.errors import SchemaRegistryUnavailableError, TransientStoreError
from bridge.metrics import BridgeMetrics

log = logging.getLogger("bridge.daemon")

#: Retrying one step: quickly at first, then every five seconds.
STEP_BACKOFF = BackoffPolicy(initial_s=0.2, cap_s=5.0)
#: What a step raises to be retried: the database or the schema registry cannot answer now.
RETRIED = (TransientStoreError, SchemaRegistryUnavailableError)


class StartupStep(NamedTuple):
    """One check before the bridge stands by: its name (as logs, metrics and status say it) and the check,
    which raises one of `RETRIED` to be retried and anything else to stop the bridge."""

    name: str
    check: Callable[[], None]


@dataclass(frozen=True, slots=True)
class Failing:
    """The start-up step that keeps failing: how often, since when, and its last error."""

    step: str
    attempts: int
    since: datetime
    error: str


class Startup:
    """Runs the start-up steps in order; what passed stays passed until `reset`."""

    def __init__(self, steps: Sequence[StartupStep], stop: threading.Event, metrics: BridgeMetrics,
                 on_failing: Callable[[Failing], None] = lambda _failing: None) -> None:
        self._steps = steps
        self._stop = stop
        self._metrics = metrics
        self._on_failing = on_failing
        self._passed: set[str] = set()
        self.failing: Failing | None = None

    def run(self) -> bool:
        """Every step not passed yet, each retried alone while it fails for now (`RETRIED`); True once all passed,
        False when asked to stop first. Other errors propagate."""
        for step in self._steps:
            if step.name in self._passed:
                continue
            if not self._until_passed(step):
                return False
            self._passed.add(step.name)
        return True

    def _until_passed(self, step: StartupStep) -> bool:
        backoff = Backoff(STEP_BACKOFF)
        attempts = 0
        since = datetime.now(UTC)
        while not self._stop.is_set():
            try:
                step.check()
            except RETRIED as exc:
                attempts += 1
                self.failed(step.name, exc, attempts=attempts, since=since)
                delay = backoff.next_delay()
                log.warning("start-up step failed; retrying that step",
                            extra={"step": step.name, "attempts": attempts, "failing_since": since.isoformat(
                                timespec="seconds"), "error": str(exc), "retry_in_s": round(delay, 2)})
                self._stop.wait(delay)
                continue
            if attempts:
                log.info("start-up step passed", extra={"step": step.name, "after_attempts": attempts + 1})
            self.failing = None
            return True
        return False

    def failed(self, step: str, exc: Exception, *, attempts: int | None = None, since: datetime | None = None) -> None:
        """Record a failed attempt at `step` (also for the steps the loop runs itself: the lease, the history)."""
        known = self.failing if self.failing is not None and self.failing.step == step else None
        self.failing = Failing(step, attempts if attempts is not None else (known.attempts + 1 if known else 1),
                               since or (known.since if known else datetime.now(UTC)), str(exc))
        self._metrics.startup_failures.labels(step=step).inc()
        self._on_failing(self.failing)

    def reset(self) -> None:
        """Check everything again at the next start (after the lease was lost to a failing database)."""
        self._passed.clear()


class StartupClock:
    """How long this instance has been starting: from when it began (or lost its footing) until it stands by
    or leads; 0 meanwhile. Read by the `outbox_startup_seconds` gauge on each scrape."""

    def __init__(self, ready: threading.Event) -> None:
        self._ready = ready
        self._since = time.monotonic()

    def restart(self) -> None:
        self._since = time.monotonic()

    def seconds(self) -> float:
        return 0.0 if self._ready.is_set() else time.monotonic() - self._since
