"""The daemon runs at its own garbage-collector pace (`bridge.daemon.memory`), and gives the process's back."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from bridge.cli import main
from bridge.daemon.memory import DAEMON_THRESHOLDS, daemon_gc


def test_the_block_runs_at_the_daemon_pace_with_start_up_frozen_and_the_old_pace_comes_back() -> None:
    before = gc.get_threshold()
    assert before != DAEMON_THRESHOLDS
    with daemon_gc():
        assert gc.get_threshold() == DAEMON_THRESHOLDS
        assert gc.get_freeze_count() > 0, "what start-up made is frozen, never walked again"
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_outbox_bridge_run_runs_the_daemon_at_that_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Daemon:
        metrics = None
        instance_id = "unit"
        ready = False
        last_error = None

        def install_signal_handlers(self) -> None:
            pass

        def run(self) -> int:
            seen["threshold"] = gc.get_threshold()
            return 0

    monkeypatch.setattr("bridge.daemon.build_daemon", lambda config: Daemon())
    before = gc.get_threshold()
    code = main(["run", "--db-url", "sqlite:///unused.db", "--bootstrap-servers", "127.0.0.1:1",
                 "--bridge-name", "unit", "--metrics-port", "0", "--allow-single-broker"])
    assert code == 0
    assert seen["threshold"] == DAEMON_THRESHOLDS
    assert gc.get_threshold() == before
