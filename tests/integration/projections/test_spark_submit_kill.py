"""`spark-submit projections/jobs/orders_current.py` killed with SIGKILL mid-run, then resumed from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from projections.examples import orders_current
from tests.integration.projections.conftest import Harness
from tests.integration.projections.events import order_lifecycle, produce

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_spark_submit_killed_mid_run_resumes_to_the_uninterrupted_tables(
    harness: Harness, spark_jars_dir: Path
) -> None:
    prefix = f"proj{uuid.uuid4().hex[:8]}"
    topic = harness.new_topic(name=f"{prefix}.order", partitions=2)
    events = order_lifecycle(10)
    produce(harness.bootstrap, topic, events)
    killed = harness.lake("killed")

    spark_submit = Path(sys.executable).parent / "spark-submit"
    command = [
        str(spark_submit), "--master", "local[2]", "--driver-memory", "1g",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.databricks.delta.autoCompact.enabled=false",
        "--jars", ",".join(str(p) for p in sorted(spark_jars_dir.glob("*.jar"))),
        str(ROOT / "projections" / "jobs" / "orders_current.py"),
        "--topic-template", f"{prefix}.{{aggregate_type}}", "--lake", killed.root,
        "--bootstrap-servers", harness.bootstrap, "--max-offsets-per-trigger", "3",
        "--trigger-interval", "0.5", "--metrics-port", "0",
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    log = (harness.tmp_path / "spark-submit.log").open("w")
    job = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        progress = Path(killed.progress(orders_current.name))
        deadline = time.monotonic() + 300
        while not (progress.exists() and json.loads(progress.read_text())["batch_id"] >= 1):
            assert job.poll() is None, (harness.tmp_path / "spark-submit.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the job applied no two batches in 300 s"
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver JVM and its Python, mid-batch or between batches
        job.wait(60)
        log.close()
    applied = sum(sum(p.values()) for p in json.loads(progress.read_text())["offsets"].values())
    assert applied < len(events), "the kill came after everything was applied"

    reference = harness.lake("reference")
    harness.run_together([([orders_current], topic, reference), ([orders_current], topic, killed)])
    assert harness.rows(orders_current, killed) == harness.rows(orders_current, reference)
