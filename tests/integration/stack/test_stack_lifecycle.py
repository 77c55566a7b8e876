"""`make up && make up && make down` on a separate run directory: the second `up` changes nothing and
`down` leaves no process of the stack running. The broker's KRaft cluster id starts with a dash, as one in 64
random ids does (base64url), and must not be taken for an option of `kafka-storage format`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _stack_pids(run_dir: Path) -> set[int]:
    """Processes whose command line or data directory points into run_dir."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(run_dir) in cmdline:
            pids.add(int(proc.name))
    return pids


def _make(target: str, env: dict[str, str]) -> str:
    result = subprocess.run(["make", "-s", target], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, f"make {target} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.timeout(600)
def test_up_is_idempotent_and_down_leaves_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    kafka_port = os.environ.get("OUTBOX_LIFECYCLE_KAFKA_PORT", "31092")
    pg_port = os.environ.get("OUTBOX_LIFECYCLE_PG_PORT", "26432")
    env = {**os.environ, "OUTBOX_RUN_DIR": str(run_dir), "OUTBOX_KAFKA_PORT": kafka_port,
           "OUTBOX_PG_PORT": pg_port, "BROKERS": "1"}
    # The postgres account must be able to reach its data directory under pytest's tmp directory.
    for parent in [tmp_path, *tmp_path.parents]:
        parent.chmod(parent.stat().st_mode | 0o001)
    (run_dir / "kafka").mkdir(parents=True)
    (run_dir / "kafka" / "cluster.id").write_text("-16azA5hSVKtW5lUkhC2dg\n")  # once seen in CI
    try:
        first = _make("up", env)
        assert "started Kafka" in first and "starting PostgreSQL" in first
        pids_after_first = _stack_pids(run_dir)
        assert len(pids_after_first) >= 2, "expected a broker and a postmaster"
        stack_env = (run_dir / "stack.env").read_text()
        assert f"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{kafka_port}" in stack_env
        assert f"OUTBOX_DB_URL=postgresql+psycopg://postgres@127.0.0.1:{pg_port}/outbox" in stack_env

        second = _make("up", env)
        assert "started Kafka" not in second and "starting PostgreSQL" not in second
        assert _stack_pids(run_dir) == pids_after_first
    finally:
        _make("down", env)
    assert _stack_pids(run_dir) == set()


@pytest.mark.timeout(120)
def test_a_port_held_by_a_stranger_is_named_at_once_instead_of_a_wait_that_times_out(tmp_path: Path) -> None:
    """A broker left running by a killed test run, or another checkout's stack, holds a port: `kafka-up` says
    which port and stops before starting a node that could not bind it."""
    env = {**os.environ, "OUTBOX_RUN_DIR": str(tmp_path / "run")}
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, str(ROOT / "ops" / "localstack.py"), "kafka-up", "--cluster", "kstranger",
             "--brokers", "1", "--port", str(port)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=100, check=False)
    assert result.returncode != 0
    assert f"port {port} on 127.0.0.1 is taken by a process this stack did not start" in result.stdout + result.stderr
    assert time.monotonic() - started < 60, "named at once, not after the wait for the broker"
    assert not _stack_pids(tmp_path / "run"), "no node was started"


def _localstack(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "ops" / "localstack.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.timeout(400)
def test_the_schema_registry_starts_once_answers_confluents_api_and_down_stops_it(tmp_path: Path) -> None:
    """`registry-up` twice starts one Apicurio process, which lists subjects at its Confluent API; `status` shows
    it on its port and `down` stops it with the rest of the stack."""
    run_dir = tmp_path / "run"
    port = os.environ.get("OUTBOX_LIFECYCLE_REGISTRY_PORT", "31081")
    env = {**os.environ, "OUTBOX_RUN_DIR": str(run_dir)}
    try:
        first = _localstack(env, "registry-up", "--port", port)
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"BRIDGE_SCHEMA_REGISTRY_URL=http://127.0.0.1:{port}/apis/ccompat/v7" in first.stdout
        pids = _stack_pids(run_dir)
        assert len(pids) == 1
        second = _localstack(env, "registry-up", "--port", port)
        assert second.returncode == 0 and "started Apicurio" not in second.stdout
        assert _stack_pids(run_dir) == pids
        status = _localstack(env, "status").stdout
        assert f"registry    up    http://127.0.0.1:{port}/apis/ccompat/v7" in status
    finally:
        _localstack(env, "down")
    assert _stack_pids(run_dir) == set()
