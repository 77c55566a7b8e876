"""The in-flight window holds per event, not per read: with a byte limit, a read of many rows sends only
as many as fit, and the rest once acknowledgements make room."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bridge.config import load_config
from bridge.core.records import KafkaRecord
from bridge.daemon import build_daemon
from bridge.kafka.testing import AcceptingTopicGuard, InMemoryPublisher, publisher_factory
from bridge.migrate import upgrade

WINDOW_BYTES = 4096
PAYLOAD = '{"note":"' + "x" * 500 + '"}'


def test_a_read_of_many_rows_sends_only_what_fits_the_byte_window(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                          "VALUES (:e, 'order', 'a', 'Placed', :p)"),
                     [{"e": f"e-{i}", "p": PAYLOAD} for i in range(200)])
    engine.dispose()
    config = load_config(flags={"db_url": url, "bridge_name": "window", "topic_template": "u.{aggregate_type}",
                                "allow_single_broker": True, "replication_factor": 1, "metrics_port": 0,
                                "max_in_flight_bytes": WINDOW_BYTES, "read_batch_size": 1000}, env={})
    delivered: list[KafkaRecord] = []
    made: list[InMemoryPublisher] = []
    daemon = build_daemon(config, publisher_factory=publisher_factory(delivered, made, hold=True),
                          topic_guard=AcceptingTopicGuard(), instance_id="window")
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not (made and made[-1].queued) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # several loop turns, each of which could read and send again
        tracker = daemon.tracker
        assert tracker is not None
        record_size = tracker.in_flight_bytes // max(1, tracker.in_flight_count)
        assert tracker.in_flight_bytes <= WINDOW_BYTES + record_size, (
            f"{tracker.in_flight_count} records ({tracker.in_flight_bytes} bytes) in flight, window {WINDOW_BYTES}"
        )
        assert made[-1].queued == tracker.in_flight_count > 1
        made[-1].hold = False  # the broker answers: the rest goes out as acks make room
        deadline = time.monotonic() + 10
        while tracker.watermark < 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert tracker.watermark == 200
        assert [r.seq for r in delivered] == list(range(1, 201))
    finally:
        daemon.stop()
        thread.join(10)
