"""A leader whose lease ran out sends nothing more: the lease is checked before every send against a
monotonic deadline counted from before the last renewal, so a pause (here a topic check that outlasts
the lease while a standby takes over) cannot slip a batch out after the takeover."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bridge.config import load_config
from bridge.daemon import build_daemon
from bridge.kafka.testing import InMemoryPublisher, publisher_factory
from bridge.kafka.topics import TopicReport
from bridge.migrate import upgrade
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore

LEASE_TIMEOUT_S = 1.0


class SlowGuard:
    """The first topic check outlasts the lease; meanwhile another instance takes the lease over."""

    def __init__(self, url: str, bridge_name: str) -> None:
        self.url = url
        self.bridge_name = bridge_name
        self.taken_over = threading.Event()

    def ensure(self, topic: str, allow_create: bool) -> TopicReport:
        if not self.taken_over.is_set():
            time.sleep(LEASE_TIMEOUT_S + 0.3)
            engine = make_engine(self.url)
            lease = OffsetStore(engine, self.bridge_name).try_acquire("usurper", lease_seconds=60)
            engine.dispose()
            assert lease is not None, "the lease should have lapsed during the pause"
            self.taken_over.set()
        return TopicReport(topic, exists=True, max_message_bytes=1_048_588)


def test_a_leader_paused_past_its_lease_sends_nothing_after_a_standby_took_over(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                          "VALUES (:e, 'order', 'a', 'Placed', '{}')"), [{"e": f"e-{i}"} for i in range(20)])
    engine.dispose()
    config = load_config(flags={"db_url": url, "bridge_name": "lease", "topic_template": "u.{aggregate_type}",
                                "allow_single_broker": True, "replication_factor": 1, "metrics_port": 0,
                                "persist_interval_s": 0.1, "lease_timeout_s": LEASE_TIMEOUT_S}, env={})
    made: list[InMemoryPublisher] = []
    guard = SlowGuard(url, config.bridge_name)
    # A broker that never answers: whatever the paused leader sends stays in `sent`.
    daemon = build_daemon(config, publisher_factory=publisher_factory([], made, hold=True),
                          topic_guard=guard, instance_id="paused-leader")
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        assert guard.taken_over.wait(10), "the topic check never ran"
        time.sleep(1.0)  # the paused leader has woken up by now, with the whole batch read
        sent = [record for publisher in made for record in publisher.sent]
        assert sent == [], f"a leader past its lease sent {len(sent)} records after the takeover"
        assert daemon.metrics.is_leader._value.get() == 0  # standing by
    finally:
        daemon.stop()
        thread.join(10)
    assert not thread.is_alive()
