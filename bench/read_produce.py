"""The second ceiling: a bare read-and-produce loop over the bridge's own query, with no tracking.

Run as `python -m bench.read_produce --topic T --count N` with the bridge's environment. It does the
work any relay of this outbox must do and nothing else: read the rows after a seq with the bridge's
own read of the database the environment names (on PostgreSQL `PostgresSession.snapshot_rows`, the
visible rows and the snapshot's horizon in one statement; on SQLite `select_after_sqlite`, the plain
seq-ordered read on the driver's tuples), on a pooled connection per read as the bridge takes it, build
each record in the design's format (`build_record`: key, payload, the five headers, the JSON check),
and produce it with a counting delivery callback. No hole rule, no ack tracker, no lease, no metrics,
no checkpoints: the bridge's rate beside this one is what its own guarantees cost. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bench.bridge_process import Deliveries, run_measurement

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from bridge.core.records import OutboxRow


def measure(topic: str, count: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    from bridge.config import load_config
    from bridge.core.records import build_record
    from bridge.daemon.memory import daemon_gc
    from bridge.kafka.publisher import PARTITION_ANY
    from bridge.store.engine import make_engine

    config = load_config()
    settings = config.producer.settings()
    engine = make_engine(config.db_url.get_secret_value())
    read = _reader(engine.dialect.name)
    batch = config.read_batch_size
    delivered = Deliveries()

    def route(_aggregate_type: str) -> str:
        return topic

    producer = Producer(settings.conf)
    producer.list_topics(topic, timeout=30)  # connect and learn the partitions before the clock starts
    produce, poll = producer.produce, producer.poll
    after = sent = 0
    with daemon_gc():  # the collector's pace the daemon runs at: an interpreter setting, not the bridge's logic
        started = time.monotonic()
        while sent < count:
            with engine.connect() as conn:
                rows = read(conn, after, min(batch, count - sent))
            if not rows:
                raise RuntimeError(f"the outbox holds only {sent} rows; {count} were asked for")
            for row in rows:
                record = build_record(row, route)
                while True:
                    try:
                        produce(record.topic, record.value, record.key, PARTITION_ANY, delivered, None, 0,
                                record.headers)
                        break
                    except BufferError:
                        poll(0.05)
            sent += len(rows)
            after = rows[-1].seq
            poll(0)
        producer.flush(300)
        elapsed = time.monotonic() - started
    engine.dispose()
    return {"events": count, "acked": delivered.acked, "failed": delivered.failed, "seconds": elapsed,
            "events_per_s": count / elapsed, "read_batch_size": batch}


def _reader(dialect: str) -> Callable[[Connection, int, int], Sequence[OutboxRow]]:
    """The bridge's own read of the rows after a seq on `dialect`, without its hole rule."""
    if dialect == "sqlite":
        from bridge.store.rows import select_after_sqlite

        return select_after_sqlite
    if dialect == "postgresql":
        from bridge.store.postgres import PostgresSession

        return lambda conn, after, limit: PostgresSession(conn).snapshot_rows(after, limit)[2]
    raise ValueError(f"the read-and-produce loop reads PostgreSQL or SQLite, not {dialect}")


def run_read_produce(env: Mapping[str, str], topic: str, count: int) -> dict[str, Any]:
    """Run the loop in its own process, like the bridge, with the bridge's environment."""
    return run_measurement("bench.read_produce", ["--topic", topic, "--count", str(count)], env,
                           "the read-and-produce loop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args()
    print(json.dumps(measure(args.topic, args.count)))


if __name__ == "__main__":
    main()
