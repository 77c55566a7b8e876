"""The JVM jars of the broker, of Spark's connectors and of the schema registry, resolved through Maven into
`.cache/jars/<which>`.

A pom under `ops/maven/` names each set (the registry's is one archive, unpacked as it ships); a copy of the pom
beside the jars (`.resolved`) says they match it, so Maven runs only on the first use and after the pom changes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from stack.places import JARS, MAVEN_SETTINGS, ROOT
from stack.processes import StackError, log

#: Each set: its pom's folder under ops/maven, and the goal that puts it in place.
SETS = {
    "kafka": ("kafka-broker", "dependency:copy-dependencies"),
    "spark": ("spark-connectors", "dependency:copy-dependencies"),
    "schema-registry": ("schema-registry", "dependency:unpack"),
}


def ensure_jars(which: str) -> Path:
    """Resolve the JVM artifacts for `kafka` (broker), `spark` (connectors) or `schema-registry` through Maven,
    once."""
    folder, goal = SETS[which]
    pom = ROOT / "ops" / "maven" / folder / "pom.xml"
    target = JARS / which
    marker = target / ".resolved"
    if marker.exists() and marker.read_text() == pom.read_text():
        return target
    if shutil.which("mvn") is None:
        raise StackError("Maven (mvn) is not installed: `apt-get install maven`, then retry")
    log(f"resolving {which} jars from Maven Central into {target} (first run only)")
    if target.exists():
        shutil.rmtree(target)
    cmd = ["mvn", "-B", "-q", "-s", str(MAVEN_SETTINGS), "-f", str(pom), goal]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"Maven could not resolve {pom}:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    marker.write_text(pom.read_text())
    return target
