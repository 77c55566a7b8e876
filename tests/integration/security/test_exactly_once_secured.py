"""Exactly-once delivery on the secured cluster (SASL_SSL, ACLs): with exactly the ACLs `bridge_bindings` gives a
bridge name in this mode (its topics, Write and Describe on its transactional.id, its progress topic with Read),
the bridge publishes and a read_committed consumer sees every event once; so does the local secured stack's bridge
user (its grants by prefix) under any bridge name; without the transactional.id's ACLs the bridge stops at once
with exit 9 and one error naming the transactional.id and the `kafka-acls` line that grants it; and the doctor
names that grant when it is missing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka.admin import NewTopic
from confluent_kafka.admin._resource import ResourceType

from bridge.kafka.access import EXIT_DENIED
from bridge.kafka.acls import bridge_bindings
from bridge.kafka.transaction_policy import transactional_id
from bridge.migrate import upgrade
from tests.conftest import RUN_DIR
from tests.integration.security.test_kafka_refusals import _bridge_env, _errors, _run_bridge
from tests.securekafka import SecureKafka, User, read_env_file
from tests.support import insert_events, read_topic, record_seq, spawn_bridge, wait_until

EVENTS = 200


def _setup(kafka: SecureKafka, sqlite_url: str, *, transactional_acls: bool,
           user: User | None = None) -> tuple[User, str, str, str]:
    """A user (new, with the ACLs of a bridge name, or `user` as it is), a bridge name, its event topic (created)
    and progress topic; the outbox holds EVENTS events."""
    aggregate = f"eos{uuid.uuid4().hex[:6]}"
    topic = f"outbox.event.{aggregate}"
    name = f"b-{uuid.uuid4().hex[:8]}"
    progress = f"outbox.progress.{name}"
    admin = kafka.admin()
    for created in (topic, progress):
        config = {"cleanup.policy": "compact"} if created == progress else {}
        admin.create_topics([NewTopic(created, 3 if created == topic else 1, 1, config=config)])[created].result(30)
    if user is None:
        user = kafka.new_user("bridge")
        bindings = bridge_bindings(user.principal, topic_prefix=topic, dlq_topic=f"outbox.dlq.{name}",
                                   transactional_id=transactional_id(name), progress_topic=progress)
        kafka.grant([b for b in bindings if transactional_acls or b.restype != ResourceType.TRANSACTIONAL_ID])
    upgrade(sqlite_url)
    insert_events(sqlite_url, EVENTS, aggregate_type=aggregate)
    return user, name, topic, progress


def _env(sqlite_url: str, kafka: SecureKafka, user: User, name: str) -> dict[str, str]:
    return _bridge_env(sqlite_url, kafka, user, name, BRIDGE_DELIVERY="exactly-once",
                       BRIDGE_TRANSACTION_INTERVAL_MS="50")


def test_with_its_acls_an_exactly_once_bridge_publishes_every_event_once_to_read_committed_consumers(
        kafka_secure: SecureKafka, sqlite_url: str, tmp_path: Path) -> None:
    user, name, topic, _ = _setup(kafka_secure, sqlite_url, transactional_acls=True)
    _publishes_every_event_once(kafka_secure, sqlite_url, user, name, topic, tmp_path)


def test_the_secured_stacks_bridge_user_runs_exactly_once_under_any_bridge_name(
        kafka_secure: SecureKafka, sqlite_url: str, tmp_path: Path) -> None:
    env = read_env_file(RUN_DIR / kafka_secure.name / "client.env")
    stack_user = User(env["KAFKA_BRIDGE_USERNAME"], env["KAFKA_BRIDGE_PASSWORD"])
    user, name, topic, _ = _setup(kafka_secure, sqlite_url, transactional_acls=True, user=stack_user)
    _publishes_every_event_once(kafka_secure, sqlite_url, user, name, topic, tmp_path)


def _publishes_every_event_once(kafka_secure: SecureKafka, sqlite_url: str, user: User, name: str, topic: str,
                                tmp_path: Path) -> None:
    bridge = spawn_bridge(_env(sqlite_url, kafka_secure, user, name), tmp_path / "bridge.log")
    try:
        consumer = kafka_secure.conf()

        def visible() -> int:
            return len(read_topic(kafka_secure.bootstrap, topic, conf=consumer))

        wait_until(lambda: not bridge.alive() or visible() >= EVENTS, 60, f"{EVENTS} events to be committed")
        assert bridge.alive(), f"the bridge stopped: {_errors((tmp_path / 'bridge.log').read_text())}"
        bridge.signal(signal.SIGTERM)
        code = bridge.wait(30)
    finally:
        bridge.stop_if_running()
    assert code == 0, (tmp_path / "bridge.log").read_text()[-3000:]
    counts = Counter(record_seq(m) for m in read_topic(kafka_secure.bootstrap, topic, conf=consumer))
    assert sorted(counts) == list(range(1, EVENTS + 1)) and set(counts.values()) == {1}
    assert not _errors((tmp_path / "bridge.log").read_text())


def test_without_the_transactional_id_acls_the_bridge_stops_with_exit_9_naming_them(
        kafka_secure: SecureKafka, sqlite_url: str, tmp_path: Path) -> None:
    user, name, _, _ = _setup(kafka_secure, sqlite_url, transactional_acls=False)
    started = time.monotonic()
    code, _, log = _run_bridge(_env(sqlite_url, kafka_secure, user, name), tmp_path / "bridge.log")
    assert code == EXIT_DENIED, log[-3000:]
    [error] = _errors(log)
    tid = transactional_id(name)
    assert f"User:{user.name} Write on transactional-id {tid}" in error, error
    assert f"--allow-principal User:{user.name} --operation Write --operation Describe --transactional-id {tid}" \
        in error, error
    assert log.count("rebuilding the producer") == 0, "stopped at the first refusal, no rebuild loop"
    assert time.monotonic() - started < 40


def test_doctor_names_missing_transactional_id_acls_and_passes_once_they_are_granted(
        kafka_secure: SecureKafka, sqlite_url: str) -> None:
    """The bridge's principal may not list ACLs (least privilege), and no instance leads: the doctor asks the broker
    for the transactional.id's producer as a new leader would, and names the grant it lacks."""
    user, name, topic, progress = _setup(kafka_secure, sqlite_url, transactional_acls=False)
    env = _env(sqlite_url, kafka_secure, user, name)
    tid = transactional_id(name)

    def transactional_checks() -> tuple[int, list[dict[str, str]]]:
        result = subprocess.run([str(Path(sys.executable).with_name("outbox-bridge")), "doctor", "--json"], env=env,
                                capture_output=True, text=True, timeout=120, check=False)
        checks = json.loads(result.stdout)["checks"]
        return result.returncode, [c for c in checks if c["name"] == "acls" and tid in c["summary"]]

    code, [check] = transactional_checks()
    assert code == 1 and check["verdict"] == "failed", check
    assert f"--allow-principal User:{user.name} --operation Write --operation Describe --transactional-id {tid}" \
        in (check["fix"] or "")
    kafka_secure.grant([b for b in bridge_bindings(user.principal, topic_prefix=topic, dlq_topic=f"outbox.dlq.{name}",
                                                   transactional_id=tid, progress_topic=progress)
                        if b.restype == ResourceType.TRANSACTIONAL_ID])
    code, [check] = transactional_checks()
    assert check["verdict"] == "ok" and "Write allowed" in check["summary"], check
