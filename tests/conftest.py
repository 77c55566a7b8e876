"""Test fixtures, in one place.

Services come, in this order, from: environment variables (`KAFKA_BOOTSTRAP_SERVERS`, `OUTBOX_DB_URL`,
`TEST_SQLSERVER_URL`, `TEST_SCHEMA_REGISTRY_URL`), testcontainers when a Docker engine answers, else the local
stack that `ops/localstack.py` starts (real Kafka brokers, PostgreSQL and a schema registry as local processes).
SQLite is always there. Only tests that need a live SQL Server skip, and they say why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCALSTACK = ROOT / "ops" / "localstack.py"
KAFKA3_PORT = int(os.environ.get("OUTBOX_KAFKA3_PORT", "29092"))
# Below the ephemeral range, apart from the others (controller 100 above).
KSECURE_PORT = int(os.environ.get("OUTBOX_KSECURE_PORT", "27092"))
RESTARTABLE_PG_PORT = int(os.environ.get("OUTBOX_RESTARTABLE_PG_PORT", "25532"))
RUN_DIR = Path(os.environ.get("OUTBOX_RUN_DIR", ROOT / ".run")).resolve()


#: What a test holds that no test on another worker may use at the same time, by the fixture that gives it.
#: `make test` runs the suite on two workers (pytest-xdist, `--dist loadgroup`), and every test of one group
#: runs on one worker, one after another: the extra clusters on fixed ports, whose fault tests stop brokers and
#: restart servers. Spark is not among them: each worker that runs a Spark test starts a session of its own, so
#: Spark's modules spread over both workers like any others. On two cores that costs a second JVM, and pays: four
#: Spark modules took 272 s on two workers against 310 s on one, and one worker alone with every Spark test left
#: the other idle for more than half of the run.
EXCLUSIVE_GROUPS = {
    "kafka_secure": "kafka-secure",
    "kafka_cluster3": "kafka3",
    "proxied_kafka": "proxied-kafka",
    "restartable_pg": "restartable-pg",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups given here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Tests under tests/unit are fast and need no service; everything under tests/integration is integration.
    for item in items:
        path = str(item.fspath)
        if f"{os.sep}unit{os.sep}" in path and not item.get_closest_marker("unit"):
            item.add_marker(pytest.mark.unit)
        if f"{os.sep}integration{os.sep}" in path and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
        item.add_marker(pytest.mark.xdist_group(_worker_group(item)))
    items[:] = _longest_first(items)


def _longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The groups in the order they should start (`make test` keeps it: --no-loadscope-reorder): the Spark jobs
    started as commands (slow projection tests: two to five minutes each), the other Spark modules and the secured
    cluster's (one to five), the other slow ones, the other integration tests, the unit tests; the most tests
    first within each. pytest-xdist's own order (most tests first) started the
    Spark modules, which have few tests, last, and the run ended on them with the other workers idle."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        marker = item.get_closest_marker("xdist_group")
        groups.setdefault(str(marker.args[0]) if marker else item.nodeid, []).append(item)

    def rank(group: list[pytest.Item]) -> tuple[int, int]:
        names = {name for item in group for name in getattr(item, "fixturenames", ())}
        slow = any(item.get_closest_marker("slow") for item in group)
        submitted = slow and any(f"{os.sep}projections{os.sep}" in str(item.fspath) for item in group)
        spark = submitted or bool(names & {"spark", "projection_spark", "kafka_secure"})
        unit = all(item.get_closest_marker("unit") for item in group)
        return (0 if submitted else 1 if spark else 2 if slow else 4 if unit else 3), -len(group)

    return [item for group in sorted(groups.values(), key=rank) for item in group]


def pytest_configure(config: pytest.Config) -> None:
    """With `--dist loadgroup`: refuse a pytest that loses the groups (pytest-xdist writes a test's group into its
    id, which pytest 9.2 ignores: pytest-dev/pytest-xdist#1386) rather than run Spark twice and fault tests
    against each other without a word."""
    major, minor = (int(part) for part in pytest.__version__.split(".")[:2])
    if config.getoption("dist", "no") == "loadgroup" and (major, minor) >= (9, 2):
        raise pytest.UsageError(
            f"pytest-xdist's --dist loadgroup does not group tests under pytest {pytest.__version__}: install the "
            "pytest pyproject.toml pins (`make venv`), or run one test at a time (`make test TEST_WORKERS=0`)"
        )


def _worker_group(item: pytest.Item) -> str:
    """The test's exclusive group, else its module: a module's tests stay on one worker, so a module-scoped
    fixture is set up once (loadgroup would otherwise spread them one by one)."""
    held = {EXCLUSIVE_GROUPS[name] for name in getattr(item, "fixturenames", ()) if name in EXCLUSIVE_GROUPS}
    if len(held) > 1:
        raise pytest.UsageError(f"{item.nodeid} uses fixtures of more than one exclusive group ({sorted(held)}): "
                                "put them in one group in tests/conftest.py's EXCLUSIVE_GROUPS")
    return held.pop() if held else item.nodeid.split("::", 1)[0]


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say where the services come from before the first test runs, and what is left running afterwards."""
    local = "the local stack (ops/localstack.py, started when first needed and left running: `make down` stops it)"
    docker = "testcontainers (a Docker engine answers); stopped at the end"
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        kafka = f"KAFKA_BOOTSTRAP_SERVERS={os.environ['KAFKA_BOOTSTRAP_SERVERS']}"
    else:
        kafka = docker if docker_engine_answers() else local
    if os.environ.get("OUTBOX_DB_URL", "").startswith("postgresql"):
        postgres = "OUTBOX_DB_URL"
    else:
        postgres = docker if docker_engine_answers() else f"{local}; installed from Debian's package when missing"
    if os.environ.get("TEST_SQLSERVER_URL"):
        sqlserver = "TEST_SQLSERVER_URL"
    else:
        sqlserver = docker if docker_engine_answers() else "none (no TEST_SQLSERVER_URL, no Docker): its tests skip"
    return [
        f"kafka: {kafka}; broker-fault tests: a 3-broker local cluster on port {KAFKA3_PORT}, left running",
        f"postgresql: {postgres}",
        f"sql server: {sqlserver}",
    ]


# ---------------------------------------------------------------------------------------- service sources


def run_stack(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ops/localstack.py with this interpreter; fail the test run with its output if it fails."""
    result = subprocess.run(
        [sys.executable, str(LOCALSTACK), *args], capture_output=True, text=True, check=False, cwd=ROOT, env=env
    )
    if result.returncode != 0:
        raise RuntimeError(f"ops/localstack.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


@cache
def docker_engine_answers() -> bool:
    if os.environ.get("OUTBOX_TESTS_NO_DOCKER"):
        return False
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:  # noqa: BLE001 - no engine, no socket, no permission: all mean "no Docker"
        return False


@cache
def local_stack_env() -> dict[str, str]:
    """Start (or reuse) the local stack and return the settings it wrote to .run/stack.env."""
    run_stack("up", "--no-spark-jars")
    env_file = RUN_DIR / "stack.env"
    values = {}
    for line in env_file.read_text().splitlines():
        key, _, value = line.partition("=")
        values[key] = value
    return values


class _Containers:
    """Containers started for this session when a Docker engine answers; stopped at the end."""

    def __init__(self) -> None:
        self.started: list[object] = []

    def kafka(self) -> str:
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_kraft()
        container.start()
        self.started.append(container)
        return str(container.get_bootstrap_server())

    def postgres(self) -> str:
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16", driver="psycopg")
        container.start()
        self.started.append(container)
        return str(container.get_connection_url())

    def sqlserver(self) -> str:
        from testcontainers.mssql import SqlServerContainer

        container = SqlServerContainer("mcr.microsoft.com/mssql/server:2022-latest", dialect="mssql+pyodbc")
        container.start()
        self.started.append(container)
        return str(container.get_connection_url()) + "?driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes"

    def stop(self) -> None:
        for container in reversed(self.started):
            container.stop()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def containers() -> Iterator[_Containers]:
    holder = _Containers()
    yield holder
    holder.stop()


# ------------------------------------------------------------------------------------------------ kafka


@pytest.fixture(scope="session")
def kafka_bootstrap(containers: _Containers) -> str:
    """Bootstrap servers of a real Kafka cluster."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    if docker_engine_answers():
        return containers.kafka()
    return local_stack_env()["KAFKA_BOOTSTRAP_SERVERS"]


@pytest.fixture()
def topic_factory(kafka_bootstrap: str) -> Iterator[Callable[..., str]]:
    """Create uniquely named topics for one test; they are deleted afterwards."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created: list[str] = []

    def create(prefix: str = "t", partitions: int = 3, replication: int = 1, config: dict[str, str] | None = None,
               name: str | None = None) -> str:
        topic = name or f"{prefix}.{uuid.uuid4().hex[:10]}"
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=config or {})]
        )
        futures[topic].result(timeout=30)
        created.append(topic)
        return topic

    yield create
    if created:
        for future in admin.delete_topics(created).values():
            with contextlib.suppress(KafkaException):  # a topic the test already deleted is fine
                future.result(timeout=30)


@dataclass
class LocalKafkaCluster:
    """A 3-broker KRaft cluster of the local stack whose brokers a test may stop and start."""

    name: str
    bootstrap: str
    brokers: int

    def stop_broker(self, node: int, kill: bool = True) -> None:
        run_stack("broker-stop", "--cluster", self.name, "--node", str(node), *(["--kill"] if kill else []))

    def start_broker(self, node: int) -> None:
        run_stack("broker-start", "--cluster", self.name, "--node", str(node), "--wait")

    def start_all(self) -> None:
        run_stack("kafka-up", "--cluster", self.name, "--brokers", str(self.brokers), "--port", str(KAFKA3_PORT))


@pytest.fixture(scope="session")
def kafka_cluster3() -> Iterator[LocalKafkaCluster]:
    """Fault tests need to kill brokers, so this cluster is always the project's own local processes."""
    cluster = LocalKafkaCluster(
        name="kafka3",
        bootstrap=",".join(f"127.0.0.1:{KAFKA3_PORT + i}" for i in range(3)),
        brokers=3,
    )
    cluster.start_all()
    yield cluster
    cluster.start_all()  # leave it whole for the next test session


@pytest.fixture(scope="session")
def kafka_secure() -> Iterator[object]:
    """A one-broker SASL_SSL (SCRAM-SHA-512) cluster with ACLs, its CA and passwords made for this session;
    stopped and removed at the end. Tests make their own users and ACLs (`tests.securekafka.SecureKafka`)."""
    from tests.securekafka import SecureKafka, User, read_env_file

    name = "ksecure"
    run_stack("kafka-down", "--cluster", name, "--remove")  # a left-over from an interrupted session
    run_stack("kafka-up", "--cluster", name, "--brokers", "1", "--port", str(KSECURE_PORT), "--secure")
    try:
        env = read_env_file(RUN_DIR / name / "client.env")
        yield SecureKafka(
            bootstrap=env["KAFKA_BOOTSTRAP_SERVERS"],
            ca=Path(env["KAFKA_SSL_CA_LOCATION"]),
            admin_user=User(env["KAFKA_ADMIN_USERNAME"], env["KAFKA_ADMIN_PASSWORD"]),
            name=name,
        )
    finally:
        run_stack("kafka-down", "--cluster", name, "--remove")


@pytest.fixture(scope="session")
def schema_registry_url() -> str:
    """A schema registry's Confluent-compatible API: `TEST_SCHEMA_REGISTRY_URL`, else the stack's Apicurio process
    (started if needed; left running like the rest of the stack, and stopped by `make down`)."""
    if os.environ.get("TEST_SCHEMA_REGISTRY_URL"):
        return os.environ["TEST_SCHEMA_REGISTRY_URL"]
    for line in run_stack("registry-up").splitlines():
        _, found, url = line.partition("BRIDGE_SCHEMA_REGISTRY_URL=")
        if found:
            return url.strip()
    raise RuntimeError("ops/localstack.py registry-up did not say where the registry listens")


# ------------------------------------------------------------------------------------------- databases


@pytest.fixture()
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'outbox.db'}"


@pytest.fixture(scope="session")
def pg_admin_url(containers: _Containers) -> str:
    """A PostgreSQL URL with the right to create databases."""
    if os.environ.get("OUTBOX_DB_URL", "").startswith("postgresql"):
        return os.environ["OUTBOX_DB_URL"]
    if docker_engine_answers():
        return containers.postgres()
    return local_stack_env()["OUTBOX_PG_ADMIN_URL"]


@dataclass(frozen=True)
class RestartablePostgres:
    """A PostgreSQL server of a fault test's own (`restartable_pg`): the test restarts it at will."""

    admin_url: str
    env: dict[str, str]

    def restart(self) -> None:
        run_stack("pg-restart", env=self.env)


@pytest.fixture(scope="session")
def restartable_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartablePostgres]:
    """A second PostgreSQL, started by the stack's own script under a run directory and port of its own, for
    fault tests that restart the server: restarting the stack's server would cut every other test's
    connections, and `make test` runs tests side by side. Stopped at the end of the session."""
    env = {**os.environ, "OUTBOX_RUN_DIR": str(tmp_path_factory.mktemp("restartable-pg")),
           "OUTBOX_PG_PORT": str(RESTARTABLE_PG_PORT)}
    run_stack("pg-up", env=env)
    try:
        yield RestartablePostgres(f"postgresql+psycopg://postgres@127.0.0.1:{RESTARTABLE_PG_PORT}/postgres", env)
    finally:
        run_stack("pg-down", env=env)


@pytest.fixture()
def postgres_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    # pre-ping: a fault test may restart the server while this engine's connections sit in the pool.
    admin = create_engine(pg_admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(pg_admin_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@dataclass(frozen=True)
class LocalPostgres:
    """The local stack's PostgreSQL as `ops/localstack.py` runs it: TLS with a certificate for 127.0.0.1 and
    localhost signed by a CA made per run directory (`ca_file`), passwords (SCRAM) for every role but the
    stack's superuser `postgres`, whose `admin_url` needs none."""

    admin_url: str
    ca_file: Path

    def tls(self, url: str, ca_file: Path | None = None) -> str:
        """`url` verified against the CA (or `ca_file`): sslmode=verify-full."""
        from sqlalchemy.engine import make_url

        query = {"sslmode": "verify-full", "sslrootcert": str(ca_file or self.ca_file)}
        return make_url(url).update_query_dict(query).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def local_pg() -> LocalPostgres:
    """The server of OUTBOX_PG_ADMIN_URL when OUTBOX_PG_SSLROOTCERT names its CA, else the local stack's."""
    if os.environ.get("OUTBOX_PG_SSLROOTCERT") and os.environ.get("OUTBOX_PG_ADMIN_URL"):
        return LocalPostgres(os.environ["OUTBOX_PG_ADMIN_URL"], Path(os.environ["OUTBOX_PG_SSLROOTCERT"]))
    env = local_stack_env()
    return LocalPostgres(env["OUTBOX_PG_ADMIN_URL"], Path(env["OUTBOX_PG_SSLROOTCERT"]))


@pytest.fixture()
def local_pg_url(local_pg: LocalPostgres) -> Iterator[str]:
    """A fresh, empty database on `local_pg` for one test (plain URL, as its superuser), dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(local_pg.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(local_pg.admin_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def sqlserver_server_url(containers: _Containers) -> str:
    if os.environ.get("TEST_SQLSERVER_URL"):
        return os.environ["TEST_SQLSERVER_URL"]
    if docker_engine_answers():
        return containers.sqlserver()
    pytest.skip(
        "needs a live SQL Server: set TEST_SQLSERVER_URL (an mssql+pyodbc URL) or run with a Docker engine; "
        "SQL Server cannot run on this machine"
    )


@pytest.fixture()
def sqlserver_url(sqlserver_server_url: str) -> Iterator[str]:
    """A fresh SQL Server database for one test, dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(sqlserver_server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE [{name}]"))
        conn.execute(text(f"ALTER DATABASE [{name}] SET ALLOW_SNAPSHOT_ISOLATION ON"))
    yield make_url(sqlserver_server_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f"ALTER DATABASE [{name}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE"))
        conn.execute(text(f"DROP DATABASE [{name}]"))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql", "mssql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """One URL per store backend, for contract tests that every backend must pass."""
    fixture = {"sqlite": "sqlite_url", "postgresql": "postgres_url", "mssql": "sqlserver_url"}[request.param]
    return str(request.getfixturevalue(fixture))


# ----------------------------------------------------------------------------------------------- spark


@pytest.fixture(scope="session")
def spark_jars_dir() -> Path:
    """The Kafka connector and Delta jars, resolved through Maven into .cache/jars/spark."""
    return Path(run_stack("jars", "spark").strip().splitlines()[-1])


#: For the tests' many tiny batches, CPU-bound on two cores, where compiling a plan costs more than running it: the
#: JIT's quick tier only (C2 compiled Spark's generated classes for a third of the JVM's CPU, for code that runs a
#: few times); expressions interpreted instead of compiled to Java (Janino) per query; Delta's state rebuilt in one
#: task and small jobs in two; no adaptive re-planning. Measured on one Spark module alone (test_ordering.py, 8
#: micro-batches of 3 to 11 rows): 123 s with Spark's defaults but the first two, 101 s with wholeStage codegen off
#: and one snapshot partition, 82 s interpreted. What a batch computes is unchanged: Spark's own tests run its
#: expressions both ways. The commands the tests start get it too (`spark_defaults_for_commands`); the job on the
#: standalone cluster and the wheel's smoke run keep Spark's defaults, so the compiled path runs here too.
TEST_SPARK_CONF = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session", autouse=True)
def spark_defaults_for_commands(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """TEST_SPARK_CONF as this process's `spark-defaults.conf` (SPARK_CONF_DIR), so the Spark jobs the tests start
    as commands (`outbox-projections run` and `replay` in the secured pipeline, the `spark-submit` kill test) get it
    as the in-process session does. The two that stand for what users run (`spark-submit` on the standalone cluster,
    the wheel's smoke run) drop the variable and keep Spark's defaults."""
    folder = tmp_path_factory.mktemp("spark-conf")
    (folder / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in TEST_SPARK_CONF.items()))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARK_CONF_DIR", str(folder))
        yield


@pytest.fixture(scope="session")
def spark(spark_jars_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One local[2] Spark session with the cached jars, pinned to loopback."""
    from projections.session import build_session

    session = build_session(
        app_name="outbox-tests",
        jars_dir=spark_jars_dir,
        warehouse=tmp_path_factory.mktemp("warehouse"),
        shuffle_partitions=2,
        extra_conf=TEST_SPARK_CONF,
    )
    yield session
    session.stop()


# ------------------------------------------------------------------------------------ kafka behind a proxy


@pytest.fixture(scope="session")
def proxied_kafka() -> Iterator[object]:
    """A private one-broker Kafka that every client reaches through a fault proxy (`tests.proxiedbroker`);
    started once, stopped and its data removed at the end of the session. Tests set its cuts with
    `proxied_kafka.proxy.reset(...)`."""
    from tests.proxiedbroker import proxied_broker

    with proxied_broker() as broker:
        yield broker
