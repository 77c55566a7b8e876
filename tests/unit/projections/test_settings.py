"""Projection settings: flags over environment over TOML over defaults, refused values name the setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.errors import ConfigurationError
from projections.settings import Settings, load_settings

pytestmark = pytest.mark.unit


def test_defaults() -> None:
    settings = load_settings(env={})
    assert settings == Settings()
    assert (settings.lake, settings.fail_on_data_loss, settings.metrics_port) == (".run/lake", True, 9465)
    assert settings.topic_template == "outbox.event.{aggregate_type}"


def test_flag_beats_env_beats_file(tmp_path: Path) -> None:
    toml = tmp_path / "projections.toml"
    toml.write_text(
        'lake = "/file/lake"\nmax_offsets_per_trigger = 10\ntrigger_interval_s = 5\n'
        '[kafka]\n"kafka.security.protocol" = "SSL"\n"kafka.ssl.key.password" = "hunter2"\n'
    )
    env = {
        "PROJECTIONS_LAKE_PATH": "/env/lake",
        "PROJECTIONS_MAX_OFFSETS_PER_TRIGGER": "20",
        "PROJECTIONS_MODULES": "a, b",
    }
    settings = load_settings(
        flags={"lake": "/flag/lake", "trigger_interval_s": None}, toml_path=toml, env=env
    )
    assert settings.lake == "/flag/lake"
    assert settings.max_offsets_per_trigger == 20
    assert settings.trigger_interval_s == 5.0
    assert settings.modules == ("a", "b")
    assert settings.kafka["kafka.security.protocol"] == "SSL"
    assert settings.masked()["kafka"] == {"kafka.security.protocol": "SSL", "kafka.ssl.key.password": "***"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PROJECTIONS_STARTING_OFFSETS": "beginning"}, "PROJECTIONS_STARTING_OFFSETS='beginning'"),
        ({"PROJECTIONS_MAX_OFFSETS_PER_TRIGGER": "0"}, "PROJECTIONS_MAX_OFFSETS_PER_TRIGGER=0"),
        ({"PROJECTIONS_MAX_OFFSETS_PER_TRIGGER": "many"}, "PROJECTIONS_MAX_OFFSETS_PER_TRIGGER='many'"),
        ({"PROJECTIONS_FAIL_ON_DATA_LOSS": "perhaps"}, "PROJECTIONS_FAIL_ON_DATA_LOSS='perhaps'"),
        ({"PROJECTIONS_METRICS_PORT": "70000"}, "PROJECTIONS_METRICS_PORT=70000"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", "\\(")):
        load_settings(env=env)


def test_fail_on_data_loss_can_be_turned_off_only_explicitly() -> None:
    assert load_settings(env={"PROJECTIONS_FAIL_ON_DATA_LOSS": "false"}).fail_on_data_loss is False
    assert load_settings(flags={"fail_on_data_loss": None}, env={}).fail_on_data_loss is True


def test_unknown_toml_settings_are_refused(tmp_path: Path) -> None:
    toml = tmp_path / "p.toml"
    toml.write_text("lakes = 'x'\n")
    with pytest.raises(ConfigurationError, match="unknown settings \\['lakes'\\]"):
        load_settings(toml_path=toml, env={})


@pytest.mark.parametrize("variable", ["KAFKA_BOOTSTRAP_SERVERS", "PROJECTIONS_LAKE_PATH", "PROJECTIONS_MODULES",
                                      "PROJECTIONS_CONFIG_FILE"])
def test_an_empty_variable_is_refused_not_taken_for_the_default(variable: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{variable}.*(is refused|is set but empty).*unset it"):
        load_settings(env={variable: ""})



def refusal(**arguments: Any) -> str:
    with pytest.raises(ConfigurationError) as refused:
        load_settings(**arguments)
    return str(refused.value)


def test_a_value_not_of_its_type_is_named_where_it_came_from(tmp_path: Path) -> None:
    toml = tmp_path / "p.toml"
    toml.write_text("max_offsets_per_trigger = 'x'\n")
    assert refusal(toml_path=toml, env={}) == f"{toml}: max_offsets_per_trigger='x' is not a valid int | None"
    assert refusal(flags={"trigger_interval_s": "soon"}, env={}) == "--trigger-interval-s='soon' is not a valid float"
    # A switch takes 1/0, true/false, yes/no or on/off, nothing else pydantic would take (t, y...).
    assert refusal(env={"PROJECTIONS_FAIL_ON_DATA_LOSS": "t"}) == (
        "PROJECTIONS_FAIL_ON_DATA_LOSS='t' is not a valid bool"
    )


def test_every_refused_value_is_named_at_once() -> None:
    assert refusal(env={"PROJECTIONS_METRICS_PORT": "70000", "PROJECTIONS_TRIGGER_INTERVAL_S": "0"}).splitlines() == [
        "PROJECTIONS_TRIGGER_INTERVAL_S=0.0: must be positive",
        "PROJECTIONS_METRICS_PORT=70000: use 0 (off) to 65535",
    ]
