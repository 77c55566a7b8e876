"""On a database that was never migrated (or is at an older revision), `run` and `status` say so, name
`outbox-bridge migrate` and exit 2 at once, instead of calling it a busy database and retrying."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from bridge.migrate import head, upgrade
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script in a child process, bounded: the old `run` retried forever."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRIDGE_", "OUTBOX_", "KAFKA_"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "bridge.cli", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=ROOT, check=False)


def _run(url: str) -> subprocess.CompletedProcess[str]:
    return _cli("run", "--db-url", url, "--bootstrap-servers", _closed_port(), "--allow-single-broker",
                "--metrics-port", "0")


@pytest.mark.parametrize("url_fixture", ["sqlite_url", "postgres_url"])
def test_run_and_status_on_an_unmigrated_database_exit_2_naming_migrate(
    url_fixture: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(url_fixture)
    run = _run(url)
    assert run.returncode == 2, run.stderr
    assert "not migrated" in run.stderr and "outbox-bridge migrate" in run.stderr
    assert "retry" not in run.stderr

    status = _cli("status", "--db-url", url)
    assert status.returncode == 2, status.stderr
    assert "not migrated" in status.stderr and "outbox-bridge migrate" in status.stderr
    assert "unreachable" not in status.stderr and "retry" not in status.stderr


def test_run_on_an_older_revision_names_the_revision_it_needs(sqlite_url: str) -> None:
    upgrade(sqlite_url, "0001")
    run = _run(sqlite_url)
    assert run.returncode == 2, run.stderr
    assert f"revision 0001, this bridge needs {head()}" in run.stderr and "outbox-bridge migrate" in run.stderr


def test_topics_ensure_on_an_unmigrated_database_exits_2_naming_migrate_not_a_traceback(
    sqlite_url: str, kafka_bootstrap: str
) -> None:
    topics = _cli("topics", "ensure", "--db-url", sqlite_url, "--bootstrap-servers", kafka_bootstrap)
    assert topics.returncode == 2, topics.stderr
    assert "not migrated" in topics.stderr and "outbox-bridge migrate" in topics.stderr
    assert "Traceback" not in topics.stderr
