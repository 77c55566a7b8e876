"""The stack's schema registry, without starting it: the pinned Apicurio build run from its unpacked folder on
loopback, the Confluent API as its URL, and `down`/`status` finding it on the port it was started with."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "ops"))
from stack import processes, registry  # ops/ holds scripts and the stack package, not on the path by default

pytestmark = pytest.mark.unit


def test_the_registry_runs_the_pinned_runner_on_loopback_from_its_folder(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / registry.RUNNER).write_bytes(b"")
    monkeypatch.setattr(registry, "ensure_jars", lambda which: tmp_path)
    monkeypatch.setattr(registry.shutil, "which", lambda name: f"/usr/bin/{name}")
    command, folder = registry.SchemaRegistry(port=28999).command()
    assert folder == tmp_path
    assert command[-2:] == ["-jar", "apicurio-registry-app-2.6.13.Final-runner.jar"]
    assert "-Dquarkus.http.host=127.0.0.1" in command and "-Dquarkus.http.port=28999" in command
    assert registry.SchemaRegistry().marker in command, "stop_pid only stops a process carrying the marker"


def test_the_url_is_the_confluent_compatible_api() -> None:
    assert registry.SchemaRegistry(port=28999).url == "http://127.0.0.1:28999/apis/ccompat/v7"


def test_down_and_status_find_the_registry_on_the_port_it_was_started_with(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "RUN", tmp_path)  # where every service's folder is
    assert registry.started_registry() is None
    home = registry.SchemaRegistry().home
    home.mkdir(parents=True)
    (home / "registry.pid").write_text("4242\n28555\n")
    started = registry.started_registry()
    assert started is not None and started.port == 28555


def test_a_registry_that_does_not_answer_is_not_ready() -> None:
    assert not registry.SchemaRegistry(port=9).answers()
