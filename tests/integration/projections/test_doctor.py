"""`outbox-projections doctor NAME`: a ready projection is all ok (exit 0); a missing topic, an unwritable lake
path and a checkpoint whose table is gone are each reported with the fix (exit 1); a running instance's lock
is seen without being taken."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from projections.cli import main
from projections.lake import Lake
from projections.lock import ProjectionLock

pytestmark = pytest.mark.integration

NAME = "orders_current"  # an example projection on outbox.event.{aggregate_type}, aggregate type "order"


def _doctor(capsys: pytest.CaptureFixture[str], lake: Path | str, bootstrap: str, template: str) -> tuple[int, list]:
    code = main(["doctor", NAME, "--lake", str(lake), "--bootstrap-servers", bootstrap, "--topic-template", template,
                 "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] == (code == 0)
    return code, report["checks"]


def _only(checks: list, name: str) -> dict:
    [check] = [c for c in checks if c["name"] == name]
    return check


def test_a_ready_projection_is_all_ok_and_sees_a_running_instance_by_its_lock(
    tmp_path: Path, kafka_bootstrap: str, topic_factory, capsys: pytest.CaptureFixture[str]
) -> None:
    template = f"pd{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    topic_factory(name=template.replace("{aggregate_type}", "order"))
    code, checks = _doctor(capsys, tmp_path / "lake", kafka_bootstrap, template)
    assert code == 0, checks
    assert {c["verdict"] for c in checks} == {"ok"}, checks

    with ProjectionLock(Lake(str(tmp_path / "lake")), NAME) as lock:
        assert lock.acquire(0)
        _, checks = _doctor(capsys, tmp_path / "lake", kafka_bootstrap, template)
        assert _only(checks, "lock")["summary"].startswith("held: an instance is running")
        assert lock.held  # the doctor looked, and did not take it away
    _, checks = _doctor(capsys, tmp_path / "lake", kafka_bootstrap, template)
    assert _only(checks, "lock")["summary"].startswith("free")


def test_a_missing_topic_fails_naming_the_topic_template(
    tmp_path: Path, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    template = f"missing{uuid.uuid4().hex[:8]}.{{aggregate_type}}"
    code, checks = _doctor(capsys, tmp_path / "lake", kafka_bootstrap, template)
    assert code == 1
    topics = _only(checks, "topics")
    assert topics["verdict"] == "failed" and template.replace("{aggregate_type}", "order") in topics["summary"]
    assert "BRIDGE_TOPIC_TEMPLATE" in topics["fix"]


def test_an_unwritable_lake_path_fails_naming_the_setting(
    tmp_path: Path, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the lake's parent should be\n")
    code, checks = _doctor(capsys, blocker / "lake", kafka_bootstrap, "outbox.event.{aggregate_type}")
    assert code == 1
    lake = _only(checks, "lake")
    assert lake["verdict"] == "failed" and str(blocker) in lake["summary"]
    assert "PROJECTIONS_LAKE_PATH" in lake["fix"]


def test_a_checkpoint_without_its_table_fails_naming_the_rebuild(
    tmp_path: Path, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    offsets = Path(lake.checkpoint(NAME)) / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("v1\n{}\n")  # a batch was read; the table it went to is gone
    code, checks = _doctor(capsys, tmp_path / "lake", kafka_bootstrap, "outbox.event.{aggregate_type}")
    assert code == 1
    checkpoint = _only(checks, "checkpoint")
    assert checkpoint["verdict"] == "failed" and "table" in checkpoint["summary"]
    assert f"outbox-projections replay {NAME} --in-place --rebuild" in checkpoint["fix"]
