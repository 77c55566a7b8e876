"""Kafka refusing the bridge, as an operator meets it: a wrong password, an unknown user, a missing ACL, an
untrusted certificate each stop `outbox-bridge run` at once with its own exit code and one error naming the
principal, the resource and the fix; nothing retries in a loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import NewTopic
from confluent_kafka.admin._acl import AclOperation

from bridge.kafka.access import EXIT_AUTHENTICATION, EXIT_CERTIFICATE, EXIT_DENIED
from bridge.kafka.acls import bridge_bindings, projection_bindings, projection_group_prefix
from bridge.migrate import upgrade
from tests.securekafka import SecureKafka, User
from tests.support import bridge_env, insert_events, spawn_bridge

#: The connection check gives up after 10 s; the process must be gone well before a retry loop would end.
EXIT_WITHIN_S = 40


def _bridge_env(db_url: str, kafka: SecureKafka, user: User, name: str | None = None,
                **overrides: str) -> dict[str, str]:
    env = bridge_env(db_url, kafka.bootstrap, name or f"b-{uuid.uuid4().hex[:8]}", "outbox.event.{aggregate_type}",
                     allow_create_topics="false")
    env.update(kafka.env(user))
    env.update(overrides)
    return env


def _run_bridge(env: dict[str, str], log: Path) -> tuple[int, float, str]:
    started = time.monotonic()
    bridge = spawn_bridge(env, log)
    try:
        code = bridge.wait(EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        bridge.kill()
        raise AssertionError(f"the bridge kept running for {EXIT_WITHIN_S}s:\n{log.read_text()[-3000:]}") from None
    return code, time.monotonic() - started, log.read_text()


def _errors(log_text: str) -> list[str]:
    """The error lines of the bridge's JSON log, as text."""
    errors = []
    for line in log_text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") == "error":
            errors.append(f"{entry.get('msg')}: {entry.get('error')}")
    return errors


def _outbox(sqlite_url: str, aggregate_type: str) -> None:
    upgrade(sqlite_url)
    insert_events(sqlite_url, 5, aggregate_type=aggregate_type)


def test_a_wrong_password_stops_the_bridge_with_exit_7_naming_the_user(kafka_secure, sqlite_url, tmp_path) -> None:
    user = kafka_secure.new_user("bridge")
    _outbox(sqlite_url, "pw")
    env = _bridge_env(sqlite_url, kafka_secure, User(user.name, "not-the-password"))
    code, _, log = _run_bridge(env, tmp_path / "bridge.log")
    assert code == EXIT_AUTHENTICATION, log[-3000:]
    [error] = _errors(log)
    assert f"User:{user.name}" in error and "KAFKA_SASL_PASSWORD" in error and kafka_secure.bootstrap in error
    assert "not-the-password" not in log


def test_an_unknown_user_stops_the_bridge_with_exit_7_naming_it(kafka_secure, sqlite_url, tmp_path) -> None:
    _outbox(sqlite_url, "ghost")
    env = _bridge_env(sqlite_url, kafka_secure, User("nobody-here", "whatever-password"))
    code, _, log = _run_bridge(env, tmp_path / "bridge.log")
    assert code == EXIT_AUTHENTICATION, log[-3000:]
    [error] = _errors(log)
    assert "User:nobody-here" in error and "--entity-name nobody-here" in error


def test_an_untrusted_certificate_stops_the_bridge_with_exit_8_naming_the_ca(kafka_secure, sqlite_url,
                                                                             tmp_path) -> None:
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k"),
                    "-out", str(other_ca), "-days", "1", "-subj", "/CN=someone-else"], check=True,
                   capture_output=True)
    user = kafka_secure.new_user("bridge")
    _outbox(sqlite_url, "tls")
    env = _bridge_env(sqlite_url, kafka_secure, user, KAFKA_SSL_CA_LOCATION=str(other_ca))
    code, _, log = _run_bridge(env, tmp_path / "bridge.log")
    assert code == EXIT_CERTIFICATE, log[-3000:]
    [error] = _errors(log)
    assert f"KAFKA_SSL_CA_LOCATION={other_ca}" in error and f"User:{user.name}" in error


def test_a_missing_write_acl_stops_the_bridge_with_exit_9_naming_topic_and_operation(kafka_secure, sqlite_url,
                                                                                   tmp_path) -> None:
    aggregate = f"acl{uuid.uuid4().hex[:6]}"
    topic = f"outbox.event.{aggregate}"
    admin = kafka_secure.admin()
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    user = kafka_secure.new_user("bridge")
    name = f"b-{uuid.uuid4().hex[:8]}"
    # The bridge's ACLs with the Write on its event topics forgotten: it may describe them and write its
    # dead-letter topic (so Kafka grants it a producer id), but not write its events.
    kafka_secure.grant([
        b for b in bridge_bindings(user.principal, topic_prefix=topic, dlq_topic=f"outbox.dlq.{name}")
        if not (b.name == topic and b.operation == AclOperation.WRITE)
    ])
    _outbox(sqlite_url, aggregate)
    code, _, log = _run_bridge(_bridge_env(sqlite_url, kafka_secure, user, name), tmp_path / "bridge.log")
    assert code == EXIT_DENIED, log[-3000:]
    errors = _errors(log)
    assert len(errors) == 1, errors
    [error] = errors
    assert f"User:{user.name} Write on topic {topic}" in error
    assert f"--allow-principal User:{user.name} --operation Write --topic {topic}" in error
    assert log.count("rebuilding the producer") == 0  # stopped at the first refusal, no rebuild loop


def test_a_projection_with_a_wrong_password_stops_before_spark_with_exit_7(kafka_secure, tmp_path) -> None:
    user = kafka_secure.new_user("proj")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "BRIDGE_", "KAFKA_", "PROJECTIONS_"))}
    env |= kafka_secure.env(User(user.name, "not-the-password")) | {"PROJECTIONS_LAKE_PATH": str(tmp_path / "lake"),
                                                                     "PROJECTIONS_METRICS_PORT": "0"}
    started = time.monotonic()
    result = subprocess.run([str(Path(sys.executable).with_name("outbox-projections")), "run", "orders_current",
                             "--available-now"], env=env, capture_output=True, text=True, timeout=EXIT_WITHIN_S)
    assert result.returncode == EXIT_AUTHENTICATION, result.stderr[-3000:]
    assert f"User:{user.name}" in result.stderr and "KAFKA_SASL_PASSWORD" in result.stderr
    assert "not-the-password" not in result.stdout + result.stderr
    assert "SparkSession" not in result.stderr and time.monotonic() - started < 20  # Spark never started


def test_doctor_names_a_missing_acl_with_the_kafka_acls_fix_and_passes_once_it_is_granted(
    kafka_secure: SecureKafka, sqlite_url: str, tmp_path: Path
) -> None:
    aggregate = f"doc{uuid.uuid4().hex[:6]}"
    topic = f"outbox.event.{aggregate}"
    admin = kafka_secure.admin()  # held: a client dropped at once cancels its requests
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    user = kafka_secure.new_user("bridge")
    name = f"b-{uuid.uuid4().hex[:8]}"
    everything = bridge_bindings(user.principal, topic_prefix=topic, dlq_topic=f"outbox.dlq.{name}")
    kafka_secure.grant([b for b in everything if not (b.name == topic and b.operation == AclOperation.WRITE)])
    _outbox(sqlite_url, aggregate)
    env = _bridge_env(sqlite_url, kafka_secure, user, name)
    doctor = [str(Path(sys.executable).with_name("outbox-bridge")), "doctor", "--json"]

    def acls() -> tuple[int, list[dict[str, str]]]:
        result = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120, check=False)
        report = json.loads(result.stdout)
        return result.returncode, [c for c in report["checks"] if c["name"] == "acls"]

    code, checks = acls()
    assert code == 1, checks
    [failed] = [c for c in checks if c["verdict"] == "failed"]
    assert topic in failed["summary"] and "write" in failed["summary"].lower()
    assert f"--allow-principal User:{user.name} --operation Write --topic {topic}" in (failed["fix"] or "")

    kafka_secure.grant(everything)
    code, checks = acls()
    assert {c["verdict"] for c in checks} == {"ok"}, checks
    assert any(topic in c["summary"] for c in checks)


def test_a_projection_that_may_not_read_its_topic_stops_before_spark_with_exit_9_naming_the_fix(
    kafka_secure: SecureKafka, tmp_path: Path
) -> None:
    topic = "outbox.event.order"  # what orders_current reads under the default template
    admin = kafka_secure.admin()  # held: a client dropped at once cancels its requests
    if topic not in admin.list_topics(timeout=30).topics:
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    user = kafka_secure.new_user("proj")
    # Its groups, and Describe on the topic, but not Read.
    kafka_secure.grant([b for b in projection_bindings(user.principal, topics=[topic],
                                                       group_prefix=projection_group_prefix("orders_current"))
                        if b.operation != AclOperation.READ or b.name != topic])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "BRIDGE_", "KAFKA_", "PROJECTIONS_"))}
    env |= kafka_secure.env(user) | {"PROJECTIONS_LAKE_PATH": str(tmp_path / "lake"), "PROJECTIONS_METRICS_PORT": "0"}
    started = time.monotonic()
    result = subprocess.run([str(Path(sys.executable).with_name("outbox-projections")), "run", "orders_current",
                             "--available-now"], env=env, capture_output=True, text=True, timeout=EXIT_WITHIN_S)
    assert result.returncode == EXIT_DENIED, result.stderr[-3000:]
    assert f"User:{user.name} Read on topic {topic}" in result.stderr
    assert f"--allow-principal User:{user.name} --operation Read --topic {topic}" in result.stderr
    assert "SparkSession" not in result.stderr and time.monotonic() - started < 20  # Spark never started
