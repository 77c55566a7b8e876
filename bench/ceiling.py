"""The ceiling: a bare confluent-kafka producer sending the bridge's records with the bridge's settings.

Run as `python -m bench.ceiling --topic T --count N --keys K` with the same environment as the
bridge: the producer configuration is the producer section of `bridge.config`, with its settings built
exactly as `outbox-bridge run` builds them. Records (key, 512-byte value, the five headers) are built before the
clock starts; the timed part is the canonical produce loop (poll on BufferError, poll(0) every 1,000
records, flush at the end). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any

from bench.bridge_process import Deliveries, run_measurement


def measure(topic: str, count: int, keys: int, prefix: str) -> dict[str, Any]:
    from confluent_kafka import Producer

    from bench.workload import Workload, now_iso
    from bridge.config import load_config
    from bridge.kafka.publisher import PARTITION_ANY

    settings = load_config().producer.settings()
    workload = Workload(prefix=prefix, keys=keys)
    occurred_at = now_iso()
    records = [workload.kafka_record(i, i + 1, occurred_at) for i in range(count)]
    delivered = Deliveries()

    producer = Producer(settings.conf)
    producer.list_topics(topic, timeout=30)  # connect and learn the partitions before the clock starts
    produce = producer.produce
    started = time.monotonic()
    for i, (key, value, headers) in enumerate(records):
        while True:
            try:
                produce(topic, value, key, PARTITION_ANY, delivered, None, 0, headers)  # as the bridge calls it
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.monotonic() - started
    return {
        "events": count,
        "acked": delivered.acked,
        "failed": delivered.failed,
        "seconds": elapsed,
        "events_per_s": count / elapsed,
        "producer_settings": settings.masked(),
    }


def run_ceiling(env: Mapping[str, str], topic: str, count: int, keys: int, prefix: str = "c") -> dict[str, Any]:
    """Run the ceiling in its own process (like the bridge) with the bridge's environment."""
    args = ["--topic", topic, "--count", str(count), "--keys", str(keys), "--prefix", prefix]
    return run_measurement("bench.ceiling", args, env, "the ceiling producer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--prefix", default="c")
    args = parser.parse_args()
    print(json.dumps(measure(args.topic, args.count, args.keys, args.prefix)))


if __name__ == "__main__":
    main()
