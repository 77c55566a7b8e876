"""A range replay into a topic that does not exist, as a principal that may not create topics, on the secured
cluster: refused before anything is sent (exit 2), naming the topic and `outbox-bridge topics ensure --topic`;
once an admin ensured the topic, the same replay delivers everything."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from bridge.kafka.acls import bridge_bindings
from bridge.migrate import upgrade
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore
from tests.support import bridge_env, insert_events

SCRIPT = str(Path(sys.executable).with_name("outbox-bridge"))


def _replay(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_principal_without_create_rights_is_refused_before_sending_with_the_fix(kafka_secure, sqlite_url) -> None:
    upgrade(sqlite_url)
    insert_events(sqlite_url, 20, aggregate_type="customer")
    engine = make_engine(sqlite_url)
    OffsetStore(engine, "ops").set_watermark(20)
    engine.dispose()
    prefix = f"repair{uuid.uuid4().hex[:6]}."
    topic = f"{prefix}customers"
    user = kafka_secure.new_user("replayer")
    # Write, Describe and DescribeConfigs under the prefix (as the bridge's own ACLs), no Create.
    kafka_secure.grant(bridge_bindings(user.principal, topic_prefix=prefix, dlq_topic="outbox.dlq.ops"))
    plain = bridge_env(sqlite_url, kafka_secure.bootstrap, "ops", "outbox.event.{aggregate_type}")
    env = plain | kafka_secure.env(user)
    args = ("replay", "--mode", "range", "--from-seq", "1", "--to-seq", "20", "--topic", topic, "--reason", "repair",
            "--yes")

    refused = _replay(env, *args)
    assert refused.returncode == 2, refused.stderr
    assert f"topic {topic} does not exist" in refused.stderr
    assert f"outbox-bridge topics ensure --topic {topic}" in refused.stderr
    assert "retry" not in refused.stderr
    assert topic not in kafka_secure.admin().list_topics(timeout=30).topics, "nothing created, nothing sent"

    ensured = _replay(plain | kafka_secure.env(), "topics", "ensure", "--topic", topic)  # as the admin
    assert ensured.returncode == 0, ensured.stderr
    done = _replay(env, *args, "--json")
    assert done.returncode == 0, done.stderr
    assert '"delivered": 20' in done.stdout
