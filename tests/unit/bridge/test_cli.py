"""The CLI explains itself and refuses bad input with exit codes that mean something."""

from __future__ import annotations

import pytest

from bridge.cli import main
from bridge.errors import RefusedError
from bridge.store.maintenance import parse_duration


@pytest.mark.parametrize(
    ("command", "phrase"),
    [
        ("run", "publish"),
        ("migrate", "--sql"),
        ("status", "--json"),
        ("topics", "ensure"),
        ("replay", "rewind"),
        ("cleanup", "watermark"),
    ],
)
def test_every_command_has_help_that_explains_it(capsys, command: str, phrase: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert phrase in capsys.readouterr().out


def test_top_level_help_lists_commands_and_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("run", "migrate", "status", "replay", "topics", "cleanup"):
        assert command in out
    assert "Exit codes" in out


def test_every_run_flag_for_a_setting_names_its_environment_variable() -> None:
    import argparse

    from bridge.cli import build_parser
    from bridge.config import ENV_NAMES

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    flags = [a for a in run._actions if a.dest in ENV_NAMES]
    assert {"metrics_port", "allow_single_broker"} <= {a.dest for a in flags}
    for action in flags:
        assert ENV_NAMES[action.dest] in (action.help or ""), action.option_strings


def test_bad_configuration_exits_2_naming_the_setting(capsys, monkeypatch) -> None:
    monkeypatch.setenv("BRIDGE_MAX_IN_FLIGHT", "0")
    assert main(["status", "--db-url", "sqlite:///:memory:"]) == 2
    err = capsys.readouterr().err
    assert "BRIDGE_MAX_IN_FLIGHT" in err and "0" in err


@pytest.mark.parametrize(("text", "seconds"), [("90m", 5400), ("12h", 43200), ("7d", 604800), ("0s", 0)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["7", "d7", "1.5h", "-1d", "7 days"])
def test_bad_durations_are_refused_with_examples(text: str) -> None:
    with pytest.raises(RefusedError, match=r"e\.g\. 90m, 12h, 7d"):
        parse_duration(text)
