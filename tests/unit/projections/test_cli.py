"""`outbox-projections` commands that need no Spark: list, refusals and exit codes."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from projections.cli import EXIT_REFUSED, EXIT_UNKNOWN, EXIT_USAGE, main

pytestmark = pytest.mark.unit


@pytest.fixture
def kafka_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka taken as not answering, at once: these commands go on without it (the source's retries would wait for
    it), and no test depends on a broker that may or may not run at the default address on this machine."""

    def unanswered(*args: object) -> bool:
        return False

    monkeypatch.setattr("projections.driver.check_kafka", unanswered)
    monkeypatch.setattr("projections.replay.check_kafka", unanswered)


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


@pytest.mark.usefixtures("kafka_unanswered")
def test_replay_needs_yes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "orders_current"]) == EXIT_REFUSED
    assert "--yes" in capsys.readouterr().err


def test_status_without_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "orders_current", "--json", "--lake", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["progress"] is None
    assert report["table"] == f"{tmp_path}/orders_current"


@pytest.mark.parametrize(
    ("spec", "kind", "value"),
    [
        ("earliest", "earliest", "earliest"),
        ("latest", "latest", "latest"),
        ("seq:1200", "seq", 1200),
        ("1200", "seq", 1200),
        ("ts:1700000000000", "timestamp", 1_700_000_000_000),
        ("2023-11-14T22:13:20Z", "timestamp", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", "timestamp", 1_700_000_000_000),
        ('{"t":{"0":5,"1":-2}}', "offsets", {"t": {"0": 5, "1": -2}}),
    ],
)
def test_from_offset_forms(spec: str, kind: str, value: object) -> None:
    from projections.starting_point import parse_from_offset

    assert parse_from_offset(spec) == (kind, value)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("yesterday", "use earliest, latest"),
        ("2023-11-14T22:13:20", "no UTC offset"),
        ('{"t":{"0":-3}}', "offsets >= -2"),
        ('{"t":{"zero":1}}', "offsets >= -2"),
        ('{"t":', "not valid JSON"),
    ],
)
def test_bad_from_offset_exits_2_naming_the_value(spec: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "orders_current", "--from-offset", spec, "--yes"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert says in err and repr(spec) in err


def test_replay_rebuild_goes_with_in_place(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "orders_current", "--rebuild", "--yes"]) == EXIT_USAGE
    assert "--in-place" in capsys.readouterr().err


def test_replay_unknown_projection_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "no_such_projection", "--from-offset", "earliest", "--yes"]) == EXIT_UNKNOWN
    assert "no_such_projection" in capsys.readouterr().err


@pytest.mark.usefixtures("kafka_unanswered")
def test_replay_without_yes_prints_the_plan_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", "orders_current", "--lake", str(tmp_path)]) == EXIT_REFUSED
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert plan["mode"] == "new table, then switch over" and plan["starting_offsets"] == "earliest"
    assert "--yes" in captured.err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("kafka_unanswered")
def test_run_refuses_while_another_instance_holds_the_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from projections.lake import Lake
    from projections.lock import ProjectionLock

    with ProjectionLock(Lake(str(tmp_path)), "orders_current") as lock:
        assert lock.acquire(0)
        assert main(["run", "orders_current", "--lake", str(tmp_path), "--available-now"]) == EXIT_REFUSED
        assert main(["replay", "orders_current", "--lake", str(tmp_path), "--in-place", "--yes"]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "already running" in err and "stop that instance first" in err


def test_lock_waits_then_gives_up(tmp_path: Path) -> None:
    from projections.lake import Lake
    from projections.lock import ProjectionLock

    lake = Lake(str(tmp_path))
    holder, waiter = ProjectionLock(lake, "p"), ProjectionLock(lake, "p")
    assert holder.acquire(0)
    waits: list[float] = []
    assert not waiter.acquire(0.2, on_wait=waits.append, every_s=0.05)
    assert waits, "on_wait was never called"
    holder.release()
    assert waiter.acquire(0)
    waiter.release()


@pytest.fixture
def silent_kafka(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, socket.socket]]:
    """A listening port that never answers, as the bootstrap servers, and Spark sessions refused: a command
    that stops before Kafka and Spark leaves the port without a connection (and takes no time waiting)."""

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("started a Spark session")

    monkeypatch.setattr("projections.session.build_session", no_spark)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        yield f"127.0.0.1:{listener.getsockname()[1]}", listener


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("orders_current", "latest_state"),
        ("orders_history", "history"),
        ("order_events", "event_log"),
        ("order_events_per_minute", "windowed_counts"),
        ("order_status", "fold"),
    ],
)
@pytest.mark.parametrize("spec", ["seq:1200", "latest", "2026-11-22T10:00:00Z", '{"outbox.event.order":{"0":42}}'])
def test_replay_into_a_new_table_from_a_later_start_is_refused_naming_kind_start_and_fix(
    name: str,
    kind: str,
    spec: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    silent_kafka: tuple[str, socket.socket],
) -> None:
    bootstrap, listener = silent_kafka
    args = ["replay", name, "--from-offset", spec, "--lake", str(tmp_path), "--bootstrap-servers", bootstrap, "--yes"]
    assert main(args) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert f"projection {name} ({kind})" in err and f"starting at {spec}" in err
    assert "--in-place" in err and "--from-offset earliest" in err and "--drop-earlier-state" in err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(BlockingIOError):  # the refusal came before anything asked Kafka
        listener.accept()


def test_replay_in_place_with_rebuild_from_a_later_start_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["replay", "order_status", "--from-offset", "latest", "--in-place", "--rebuild", "--yes"]
    assert main(args) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "--in-place --rebuild starting at latest" in err and "drop --rebuild" in err


@pytest.mark.parametrize(
    "flags",
    [["--drop-earlier-state"], ["--in-place"]],
    ids=["new-table-with-drop-earlier-state", "in-place-without-rebuild"],
)
@pytest.mark.usefixtures("kafka_unanswered")
def test_replay_from_a_later_start_passes_the_guard_when_meant_or_onto_the_live_table(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without --yes the command stops after printing its plan: reaching the plan shows the guard let it by.
    assert main(["replay", "order_status", "--from-offset", "latest", "--lake", str(tmp_path), *flags]) == EXIT_REFUSED
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert plan["starting_offsets"] == "latest"
    assert plan["drop_earlier_state"] == ("--drop-earlier-state" in flags)
    assert "refused" not in captured.err and "--yes" in captured.err


def test_replay_help_documents_drop_earlier_state(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert "--drop-earlier-state" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["replay", "run"])
def test_help_documents_accepting_a_truncated_history(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--accept-truncated-history" in out and "first offset" in out
