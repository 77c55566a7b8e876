"""A projection job submitted to a Spark standalone cluster (a master and two workers on loopback, started by
`ops/sparkcluster.py` from the PySpark distribution), the project shipped with `--py-files` as on a real
cluster: its tables equal the `local[2]` build, even with a worker killed with SIGKILL mid-run. (One job shows both:
a separate run without the kill took three minutes here and showed nothing this one does not.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from projections.examples import orders_current
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import order_lifecycle, produce

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = [sys.executable, str(ROOT / "ops" / "sparkcluster.py")]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _cluster(*args: str) -> str:
    result = subprocess.run([*CLUSTER, *args], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, f"ops/sparkcluster.py {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def master() -> Iterator[str]:
    """A master and two 1-core workers; stopped afterwards unless they were running before."""
    was_running = "running" in _cluster("status")
    _cluster("up", "--workers", "2", "--worker-memory", "1g")
    yield f"spark://127.0.0.1:{os.environ.get('OUTBOX_SPARK_MASTER_PORT', '27077')}"
    if not was_running:
        _cluster("down")


@pytest.fixture(scope="module")
def project_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`bridge` and `projections` as one zip, what a cluster's executors get through --py-files."""
    path = tmp_path_factory.mktemp("pyfiles") / "outbox.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for package in ("bridge", "projections"):
            for file in (ROOT / package).rglob("*.py"):
                archive.write(file, file.relative_to(ROOT))
    return path


def _submit(master: str, jars: Path, py_files: Path, lake: str, prefix: str, bootstrap: str,
            log: Path, per_batch: int) -> subprocess.Popen[bytes]:
    command = [
        str(Path(sys.executable).parent / "spark-submit"), "--master", master,
        "--driver-memory", "1g", "--executor-memory", "512m", "--total-executor-cores", "2",
        "--conf", "spark.executor.cores=1",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.databricks.delta.autoCompact.enabled=false",
        "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
        "--jars", ",".join(str(p) for p in sorted(jars.glob("*.jar"))),
        "--py-files", str(py_files),
        str(ROOT / "projections" / "jobs" / "orders_current.py"),
        "--topic-template", f"{prefix}.{{aggregate_type}}", "--lake", lake,
        "--bootstrap-servers", bootstrap, "--max-offsets-per-trigger", str(per_batch),
        "--available-now", "--metrics-port", "0",
    ]  # fmt: skip
    # spark-submit puts the zip on the driver's path as well; nothing from this test's PYTHONPATH.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYTHONPATH", None)
    env.pop("SPARK_CONF_DIR", None)  # Spark's defaults, as users submit it, not the tests' settings
    return subprocess.Popen(command, cwd=log.parent, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _applied_batches(progress: Path) -> int:
    return json.loads(progress.read_text())["batch_id"] + 1 if progress.exists() else 0


def _executors_of(log: Path) -> int:
    return log.read_text(errors="replace").count("Granted executor ID")


def test_a_job_on_the_cluster_builds_the_local_tables_even_with_a_worker_killed_mid_run(
    harness: Harness, master: str, spark_jars_dir: Path, project_zip: Path
) -> None:
    prefix = f"cl{uuid.uuid4().hex[:8]}"
    topic = harness.new_topic(name=f"{prefix}.order", partitions=2)
    events = order_lifecycle(6)  # 15 events, 4 batches: the kill comes after the first
    produce(harness.bootstrap, topic, events)
    on_cluster = harness.lake("cluster")
    log = harness.tmp_path / "spark-submit.log"
    job = _submit(master, spark_jars_dir, project_zip, on_cluster.root, prefix, harness.bootstrap, log, 4)
    progress = Path(on_cluster.progress(orders_current.name))
    try:
        deadline = time.monotonic() + 300
        while _applied_batches(progress) < 1:
            assert job.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the job applied no batch in 300 s"
            time.sleep(0.2)
        assert _executors_of(log) == 2 and master in log.read_text(errors="replace"), "it runs on both workers"
        _cluster("kill-worker", "1")
        killed_at = _applied_batches(progress)
        assert job.wait(420) == 0, log.read_text(errors="replace")[-4000:]
    finally:
        if job.poll() is None:
            job.kill()
        _cluster("start-worker", "1")
    batches = _applied_batches(progress)
    assert batches > killed_at, "the job went on after the worker was lost"
    applied = sum(sum(p.values()) for p in json.loads(progress.read_text())["offsets"].values())
    assert applied == len(events)
    text = log.read_text(errors="replace")
    assert "lost" in text.lower() or "removed" in text.lower(), "the driver noticed the lost executor"

    reference = harness.lake("local")
    harness.run([orders_current], topic, reference)
    assert harness.rows(orders_current, on_cluster) == harness.rows(orders_current, reference)
