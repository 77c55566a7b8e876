"""The start-up steps on their own: a step that fails with a database error is retried alone, a step that
passed is not run again, an error waiting cannot fix is not retried, and the failing step is named."""

from __future__ import annotations

import threading

import pytest

from bridge.daemon import startup
from bridge.daemon.startup import Failing, Startup, StartupStep
from bridge.errors import NotMigratedError, TransientStoreError
from bridge.metrics import BridgeMetrics

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "STEP_BACKOFF", startup.BackoffPolicy(initial_s=0.001, cap_s=0.001))


def _flaky(name: str, fail_times: int, calls: list[str]) -> StartupStep:
    left = [fail_times]

    def check() -> None:
        calls.append(name)
        if left[0]:
            left[0] -= 1
            raise TransientStoreError(f"{name}: server closed the connection unexpectedly")

    return StartupStep(name, check)


def test_each_step_is_retried_alone_and_what_passed_is_not_run_again() -> None:
    calls: list[str] = []
    failing: list[Failing] = []
    metrics = BridgeMetrics()
    steps = [_flaky("schema revision", 0, calls), _flaky("seq path", 3, calls), _flaky("kafka", 1, calls)]
    assert Startup(steps, threading.Event(), metrics, on_failing=failing.append).run()
    assert calls == ["schema revision", "seq path", "seq path", "seq path", "seq path", "kafka", "kafka"]
    assert [(f.step, f.attempts) for f in failing] == [("seq path", 1), ("seq path", 2), ("seq path", 3),
                                                       ("kafka", 1)]
    assert len({f.since for f in failing if f.step == "seq path"}) == 1, "failing since the first attempt"
    assert "server closed the connection" in failing[-1].error
    assert metrics.registry.get_sample_value("outbox_startup_failures_total", {"step": "seq path"}) == 3


def test_a_start_again_runs_only_what_has_not_passed_until_reset() -> None:
    calls: list[str] = []
    run = Startup([_flaky("schema revision", 0, calls)], threading.Event(), BridgeMetrics())
    assert run.run() and run.run()
    assert calls == ["schema revision"]
    run.reset()
    assert run.run() and calls == ["schema revision", "schema revision"]


def test_an_error_that_waiting_cannot_fix_is_not_retried() -> None:
    calls: list[str] = []

    def not_migrated() -> None:
        calls.append("schema revision")
        raise NotMigratedError("refusing to start: never migrated")

    with pytest.raises(NotMigratedError):
        Startup([StartupStep("schema revision", not_migrated)], threading.Event(), BridgeMetrics()).run()
    assert calls == ["schema revision"]


def test_stopping_while_a_step_fails_ends_the_start() -> None:
    stop = threading.Event()

    def failing() -> None:
        stop.set()
        raise TransientStoreError("down")

    assert not Startup([StartupStep("lease", failing)], stop, BridgeMetrics()).run()
