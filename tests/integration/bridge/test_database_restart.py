"""A PostgreSQL restart while the bridge publishes and the application writes: the bridge reconnects
with backoff and keeps going, and every committed event, before, during and after the restart, is
in Kafka."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from bridge.migrate import upgrade
from tests.conftest import RestartablePostgres
from tests.support import bridge_config, committed_seqs, head_seq, read_topic, seq_counts, start_bridge, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

INSERT = text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
              "VALUES (:event_id, 'order', :aggregate_id, 'OrderPlaced', '{}')")


def _write_until(url: str, stop: threading.Event, errors: list[str]) -> None:
    """The application: a batch of 20 events every 50 ms; failures (the server is down) are retried."""
    engine = create_engine(url, pool_pre_ping=True)
    n = 0
    while not stop.is_set():
        try:
            with engine.begin() as conn:
                conn.execute(INSERT, [{"event_id": f"w-{n}-{i}", "aggregate_id": f"a-{i % 7}"} for i in range(20)])
            n += 1
        except DBAPIError as exc:
            errors.append(type(exc.orig).__name__)
            time.sleep(0.2)
        time.sleep(0.05)
    engine.dispose()


def test_postgresql_restart_mid_run_loses_nothing_and_the_bridge_keeps_going(
    restartable_pg: RestartablePostgres, kafka_bootstrap: str
) -> None:
    pg_admin_url = restartable_pg.admin_url
    # A database of our own rather than the postgres_url fixture, whose pooled admin connection would
    # not survive the restart to drop the database afterwards.
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(pg_admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(pg_admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        config = bridge_config(url, kafka_bootstrap, persist_interval_s=0.2, lease_timeout_s=10)
        bridge = start_bridge(config)
        stop = threading.Event()
        write_errors: list[str] = []
        writer = threading.Thread(target=_write_until, args=(url, stop, write_errors), daemon=True)
        writer.start()
        try:
            time.sleep(2)
            before = bridge.daemon.tracker.watermark if bridge.daemon.tracker else 0
            started = time.monotonic()
            restartable_pg.restart()
            restart_s = time.monotonic() - started
            head_after_restart = head_seq(url)
            time.sleep(3)  # the application goes on writing after the restart
        finally:
            stop.set()
            writer.join(30)
        target = head_seq(url)
        wait_until(lambda: bridge.daemon.tracker is not None and bridge.daemon.tracker.watermark == target, 60,
                   f"the bridge to publish through seq {target} after the restart")
        daemon = bridge.daemon
        database_errors = daemon.metrics.publish_errors.labels(kind="database")._value.get()
        assert bridge.thread.is_alive(), "the bridge kept running through the restart"
        assert bridge.stop() == 0
        rows = committed_seqs(url)
        counts = seq_counts(read_topic(kafka_bootstrap, config.topic_for("order")))
        duplicates = sum(counts.values()) - len(counts)
        print(f"\nrestart took {restart_s:.1f}s; watermark {before} before it, head {head_after_restart} right "
              f"after it, watermark {target} at the end; {database_errors:.0f} database errors seen by the bridge, "
              f"{len(write_errors)} by the writer; {len(rows)} events, {duplicates} duplicates")
        assert database_errors > 0, "the bridge saw the outage"
        assert before < head_after_restart < target, "events were written before, during and after the restart"
        assert set(counts) == set(rows), "every committed event is in Kafka"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
