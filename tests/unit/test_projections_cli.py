"""`outbox-projections` commands that need no Spark: list, refusals and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from projections.cli import EXIT_REFUSED, EXIT_UNKNOWN, EXIT_USAGE, main

pytestmark = pytest.mark.unit


def test_list_shows_the_example_projections(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert set(listed) == {
        "orders_current",
        "orders_history",
        "order_events",
        "order_events_per_minute",
        "order_status",
    }
    assert listed["orders_current"]["kind"] == "latest_state"
    assert listed["orders_current"]["subscribe"] == "outbox.event.order"


def test_list_renders_the_topic_template(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BRIDGE_TOPIC_TEMPLATE", "shop.{aggregate_type}.events")
    assert main(["list"]) == 0
    assert "shop.order.events" in capsys.readouterr().out


def test_unknown_projection_and_bad_settings_fail_before_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["status", "nope"]) == EXIT_UNKNOWN
    assert main(["run", "orders_current", "--topic-template", "no-placeholder"]) == EXIT_USAGE
    assert main(["run", "orders_current", "--max-offsets-per-trigger", "0"]) == EXIT_USAGE


def test_replay_needs_yes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "orders_current"]) == EXIT_REFUSED
    assert "--yes" in capsys.readouterr().err


def test_status_without_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "orders_current", "--json", "--lake", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["progress"] is None
    assert report["table"] == f"{tmp_path}/orders_current"
