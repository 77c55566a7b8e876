"""The JVM jars of the broker and of Spark's connectors, resolved through Maven into `.cache/jars/<which>`.

A pom under `ops/maven/` names each set; a copy of the pom beside the jars (`.resolved`) says they match it,
so Maven runs only on the first use and after the pom changes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from stack.places import JARS, MAVEN_SETTINGS, ROOT
from stack.processes import StackError, log


def ensure_jars(which: str) -> Path:
    """Resolve the JVM artifacts for `kafka` (broker) or `spark` (connectors) through Maven, once."""
    pom = ROOT / "ops" / "maven" / {"kafka": "kafka-broker", "spark": "spark-connectors"}[which] / "pom.xml"
    target = JARS / which
    marker = target / ".resolved"
    if marker.exists() and marker.read_text() == pom.read_text():
        return target
    if shutil.which("mvn") is None:
        raise StackError("Maven (mvn) is not installed: `apt-get install maven`, then retry")
    log(f"resolving {which} jars from Maven Central into {target} (first run only)")
    if target.exists():
        shutil.rmtree(target)
    cmd = ["mvn", "-B", "-q", "-s", str(MAVEN_SETTINGS), "-f", str(pom), "dependency:copy-dependencies"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"Maven could not resolve {pom}:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    marker.write_text(pom.read_text())
    return target
