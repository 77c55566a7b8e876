"""Spark session factory: the pinned Kafka connector and Delta jars, Delta's SQL extensions, loopback only."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# These must agree with pyproject.toml (pyspark, delta-spark) and ops/maven/spark-connectors/pom.xml.
SPARK_VERSION = "4.0.0"
DELTA_VERSION = "4.0.0"
SCALA_BINARY = "2.13"
PACKAGES = (
    f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}",
    f"io.delta:delta-spark_{SCALA_BINARY}:{DELTA_VERSION}",
)
DEFAULT_JARS_DIR = Path(__file__).resolve().parent.parent / ".cache" / "jars" / "spark"


def connector_jars(jars_dir: Path) -> list[str]:
    """The jar files to put on Spark's classpath, refusing a directory that lacks the connector or Delta."""
    jars = sorted(str(p) for p in jars_dir.glob("*.jar"))
    names = " ".join(Path(j).name for j in jars)
    wanted = (
        f"spark-sql-kafka-0-10_{SCALA_BINARY}-{SPARK_VERSION}",
        f"delta-spark_{SCALA_BINARY}-{DELTA_VERSION}",
    )
    for needed in wanted:
        if needed not in names:
            raise ConfigurationError(
                f"{jars_dir} has no {needed}.jar; run `make jars` "
                "(or `python ops/localstack.py jars spark`), "
                f"or set SPARK_PACKAGES=1 to let Spark fetch {', '.join(PACKAGES)}"
            )
    return jars


def build_session(
    app_name: str = "outbox-projections",
    master: str | None = None,
    jars_dir: Path | None = None,
    warehouse: Path | None = None,
    shuffle_partitions: int = 4,
    driver_memory: str = "1g",
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Build (or reuse) a Spark session wired for Kafka and Delta.

    Jars come from the project's Maven cache so jobs run offline; with SPARK_PACKAGES=1 Spark resolves the
    same coordinates with --packages instead. Under spark-submit, what the command line sets (master, jars,
    any --conf) wins over these defaults.
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    # spark-submit starts the JVM first and hands its gateway to Python (PYSPARK_GATEWAY_PORT).
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    # Spark otherwise binds to the machine's outward address; everything here stays on loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (fold functions) must run the driver's interpreter, with the project importable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf: dict[str, str] = {
        "spark.driver.host": os.environ.get("SPARK_DRIVER_HOST", "127.0.0.1"),
        "spark.driver.bindAddress": os.environ.get("SPARK_DRIVER_BIND_ADDRESS", "127.0.0.1"),
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # No synchronous compaction or extra shuffle after every micro-batch: both cost more per batch
        # than they save on local[2] (see docs/BENCHMARKS.md, B5). `outbox-projections maintain`
        # compacts (OPTIMIZE) on a schedule instead.
        "spark.databricks.delta.optimizeWrite.enabled": "false",
        "spark.databricks.delta.autoCompact.enabled": "false",
        # Delta rebuilds a table's state in this many tasks (default 50); small tables want few.
        "spark.databricks.delta.snapshotPartitions": str(max(1, shuffle_partitions)),
    }
    if master or not under_spark_submit:
        conf["spark.master"] = master or os.environ.get("SPARK_MASTER", "local[2]")
    if warehouse is not None:
        conf["spark.sql.warehouse.dir"] = str(warehouse)
    if os.environ.get("SPARK_PACKAGES") == "1":
        conf["spark.jars.packages"] = ",".join(PACKAGES)
    elif jars_dir is not None or not under_spark_submit:
        jars = connector_jars(jars_dir or Path(os.environ.get("SPARK_JARS_DIR", DEFAULT_JARS_DIR)))
        conf["spark.jars"] = ",".join(jars)
    if under_spark_submit:
        submitted = SparkConf()  # loaded from the JVM spark-submit started
        conf = {
            k: v for k, v in conf.items() if not submitted.contains(k) or (k == "spark.master" and master)
        }
    conf.update(extra_conf or {})
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return session
