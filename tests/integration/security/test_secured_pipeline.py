"""The whole pipeline secured end to end: writer -> PostgreSQL (verified TLS) -> bridge -> Kafka (SASL_SSL,
SCRAM, ACLs) -> projection (real Spark, Delta). The writer and the bridge log in to PostgreSQL with the
least-privilege roles of `outbox-bridge grants`, over `sslmode=verify-full`; the bridge and the projection
are each their own least-privileged Kafka principal, `topics ensure` runs as the admin; the table is exact.
Then no password (Kafka's or the database's) is found anywhere the processes wrote: logs, `status --json`,
`/metrics`, error messages, the replay's record.

One pipeline run (module fixture) serves both tests: Spark starts twice in it (run, then replay).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bridge.kafka.access import EXIT_AUTHENTICATION, EXIT_DENIED
from bridge.kafka.acls import bridge_bindings, projection_bindings, projection_group_prefix
from bridge.migrate import upgrade
from projections.examples import orders_current
from tests.conftest import LocalPostgres
from tests.securekafka import SecureKafka
from tests.support import Roles, least_privilege_roles, persisted_watermark, spawn_bridge, wait_until

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = Path(sys.executable).parent
ORDERS = 12
TOPIC = "outbox.event.order"  # orders_current reads aggregate type `order`


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _clean_env() -> dict[str, str]:
    """The inherited environment without any setting of ours (the shared stack's may be exported)."""
    prefixes = ("OUTBOX_", "BRIDGE_", "KAFKA_", "PROJECTIONS_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def _events() -> tuple[list[dict[str, Any]], dict[str, tuple[str, Decimal, str]], set[str]]:
    """Orders placed, some paid, some cancelled; with the live rows and tombstones orders_current must hold."""
    rows: list[dict[str, Any]] = []
    live: dict[str, tuple[str, Decimal, str]] = {}
    cancelled: set[str] = set()

    def add(order: str, event_type: str, payload: dict[str, Any]) -> None:
        rows.append({"event_id": str(uuid.uuid4()), "aggregate_type": "order", "aggregate_id": order,
                     "event_type": event_type, "payload": json.dumps({"order_id": order, **payload})})

    for i in range(ORDERS):
        order = f"o-{i:03d}"
        amount = Decimal(f"{10 + i}.50")
        add(order, "OrderPlaced", {"customer": f"c{i % 3}", "amount": str(amount), "currency": "EUR"})
        live[order] = (f"c{i % 3}", amount, "EUR")
        if i % 3 == 0:
            paid = amount + 1
            add(order, "OrderPaid", {"amount": str(paid)})
            live[order] = (f"c{i % 3}", paid, "EUR")
        if i % 4 == 1:
            add(order, "OrderCancelled", {"reason": "changed mind"})
            del live[order]
            cancelled.add(order)
    return rows, live, cancelled


@dataclass
class PipelineRun:
    """What the secured pipeline did and every text it produced."""

    passwords: dict[str, str]
    expected_live: dict[str, tuple[str, Decimal, str]]
    expected_cancelled: set[str]
    live: dict[str, tuple[str, Decimal, str]] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    texts: dict[str, str] = field(default_factory=dict)  # what -> its text
    bridge_db_sessions: list[tuple[str, bool]] = field(default_factory=list)  # (login, encrypted)


def _run(cmd: list[str], env: dict[str, str], timeout: float, what: str, run: PipelineRun,
         expect: int | None = 0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
    run.texts[what] = result.stdout + result.stderr
    if expect is not None:
        assert result.returncode == expect, f"{what} exited {result.returncode}:\n{run.texts[what][-4000:]}"
    return result


@pytest.fixture(scope="module")
def pipeline(kafka_secure: SecureKafka, local_pg: LocalPostgres, spark: Any, spark_jars_dir: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[PipelineRun]:
    work = tmp_path_factory.mktemp("secured-pipeline")
    database = f"t_{uuid.uuid4().hex[:12]}"
    admin_engine = create_engine(local_pg.admin_url, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{database}"'))
    db_url = make_url(local_pg.admin_url).set(database=database).render_as_string(hide_password=False)
    try:
        upgrade(db_url)  # the DBA migrates, then grants the roles
        with least_privilege_roles(db_url) as roles:
            yield _pipeline(kafka_secure, local_pg, roles, spark, spark_jars_dir, work)
    finally:
        with admin_engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin_engine.dispose()


def _pipeline(kafka: SecureKafka, pg: LocalPostgres, roles: Roles, spark: Any, jars: Path,
              work: Path) -> PipelineRun:
    bridge_name = f"sec-{uuid.uuid4().hex[:6]}"
    bridge_user = kafka.new_user("bridge")
    kafka.grant(bridge_bindings(bridge_user.principal, topic_prefix="outbox.event.",
                                dlq_topic=f"outbox.dlq.{bridge_name}"))
    projection_user = kafka.new_user("proj-orders")
    kafka.grant(projection_bindings(projection_user.principal, topics=[TOPIC],
                                    group_prefix=projection_group_prefix(orders_current.name)))
    rows, live, cancelled = _events()
    run = PipelineRun(
        passwords={"admin": kafka.admin_user.password, "bridge": bridge_user.password,
                   "projection": projection_user.password,
                   **{f"database login {login}": password for login, password in roles.passwords.items()}},
        expected_live=live, expected_cancelled=cancelled,
    )

    # The application writes the outbox with plain SQL, as the writer role, over verified TLS.
    writer_url, bridge_db_url = pg.tls(roles.writer_url), pg.tls(roles.bridge_url)
    engine = create_engine(writer_url)
    with engine.begin() as conn:
        assert conn.execute(text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")).scalar_one()
        conn.execute(text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                          "VALUES (:event_id, :aggregate_type, :aggregate_id, :event_type, :payload)"), rows)
    engine.dispose()
    db_url = roles.admin_url  # what the test itself reads the watermark with

    bridge_settings = {"OUTBOX_DB_URL": bridge_db_url, "BRIDGE_NAME": bridge_name, "BRIDGE_REPLICATION_FACTOR": "1",
                       "BRIDGE_ALLOW_SINGLE_BROKER": "true", "BRIDGE_TOPIC_PARTITIONS": "3"}
    bridge_cli = str(SCRIPTS / "outbox-bridge")

    # 1. The admin creates the topics; the bridge may not.
    admin_env = _clean_env() | kafka.env() | bridge_settings
    _run([bridge_cli, "topics", "ensure", "--json"], admin_env, 120, "topics ensure (admin)", run)

    # 2. The bridge publishes as its own principal.
    metrics_port = _free_port()
    bridge_env = _clean_env() | kafka.env(bridge_user) | bridge_settings | {
        "BRIDGE_ALLOW_CREATE_TOPICS": "false", "BRIDGE_METRICS_PORT": str(metrics_port),
        "BRIDGE_PERSIST_INTERVAL_S": "0.2", "BRIDGE_LEASE_TIMEOUT_S": "3",
    }
    bridge = spawn_bridge(bridge_env, work / "bridge.log")
    try:
        wait_until(lambda: persisted_watermark(db_url, bridge_name) == len(rows), 90,
                   f"the bridge to publish {len(rows)} events over SASL_SSL")
        bridge_login = make_url(roles.bridge_url).username
        admin = create_engine(db_url)
        with admin.connect() as conn:
            run.bridge_db_sessions = [(r[0], bool(r[1])) for r in conn.execute(text(
                "SELECT a.usename, s.ssl FROM pg_stat_ssl AS s JOIN pg_stat_activity AS a USING (pid) "
                "WHERE a.usename = :login"), {"login": bridge_login})]
        admin.dispose()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
            run.texts["/metrics"] = response.read().decode()
        _run([bridge_cli, "status", "--json"], bridge_env, 60, "status --json", run)
        # An operator's mistakes, as they see them: a wrong password, and a topic the bridge may not describe.
        wrong = bridge_env | {"KAFKA_SASL_PASSWORD": "wrong-" + uuid.uuid4().hex}
        _run([bridge_cli, "topics", "check"], wrong, 60, "error: wrong password", run, expect=EXIT_AUTHENTICATION)
        _run([bridge_cli, "topics", "check", "--topic", "someone.elses.topic"], bridge_env, 60,
             "error: missing ACL", run, expect=EXIT_DENIED)
        bridge.signal(signal.SIGTERM)
        assert bridge.wait(60) == 0
    finally:
        bridge.stop_if_running()
    run.texts["bridge log"] = (work / "bridge.log").read_text()

    # 3. The projection reads as its own principal, in its own consumer groups: run, then replay from a seq
    #    (replay's own consumer looks the seq up in Kafka).
    lake = work / "lake"
    projection_env = _clean_env() | kafka.env(projection_user) | {
        "PROJECTIONS_LAKE_PATH": str(lake), "PROJECTIONS_METRICS_PORT": "0", "SPARK_JARS_DIR": str(jars),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    projections_cli = str(SCRIPTS / "outbox-projections")
    _run([projections_cli, "run", orders_current.name, "--available-now"], projection_env, 300,
         "projection run", run)
    _run([projections_cli, "replay", orders_current.name, "--from-offset", "seq:1", "--drop-earlier-state",
          "--available-now", "--yes"], projection_env, 300, "projection replay", run)
    for record in sorted((lake / "_replays").rglob("*.json")):
        run.texts[f"replay record {record.name}"] = record.read_text()

    table = spark.read.format("delta").load(str(lake / orders_current.name)).collect()  # type: ignore[attr-defined]
    run.live = {r["order_id"]: (r["customer"], r["amount"], r["currency"]) for r in table if not r["is_deleted"]}
    run.cancelled = {r["order_id"] for r in table if r["is_deleted"]}
    return run


def test_writer_to_delta_over_sasl_ssl_with_least_privileged_principals_is_exact(pipeline: PipelineRun) -> None:
    assert pipeline.bridge_db_sessions, "the bridge held no database session as its login"
    assert all(encrypted for _, encrypted in pipeline.bridge_db_sessions), pipeline.bridge_db_sessions
    assert pipeline.live == pipeline.expected_live
    assert pipeline.cancelled == pipeline.expected_cancelled
    assert '"watermark": ' in pipeline.texts["status --json"]
    assert "outbox_watermark_seq" in pipeline.texts["/metrics"]
    assert any(name.startswith("replay record") for name in pipeline.texts), "the replay wrote no record"


def test_no_password_leaves_the_processes(pipeline: PipelineRun) -> None:
    assert "KAFKA_SASL_PASSWORD" in pipeline.texts["error: wrong password"]  # the error was really there
    assert "--operation Describe --topic someone.elses.topic" in pipeline.texts["error: missing ACL"]
    leaks = [
        f"the {role} password in {what}"
        for role, password in pipeline.passwords.items()
        for what, content in pipeline.texts.items()
        if password in content
    ]
    assert not leaks, leaks
    searched = sum(len(content.splitlines()) for content in pipeline.texts.values())
    assert searched > 50, f"only {searched} lines searched: {sorted(pipeline.texts)}"
