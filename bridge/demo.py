"""`make demo`: the whole pipeline on embedded defaults, showing events flowing.

An order generator writes events into a SQLite outbox, the real bridge daemon (`outbox-bridge run`, a
subprocess) publishes them to the local Kafka broker, and a Spark projection fills a Delta table under
`.run/lake`. A live table shows each stage catching up.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from rich.console import Console
from rich.live import Live
from rich.table import Table
from sqlalchemy import create_engine, text

from bridge.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / ".run"
console = Console()


def stack_env() -> dict[str, str]:
    """Start the local stack (idempotent) and return what it wrote to .run/stack.env."""
    subprocess.run([sys.executable, str(ROOT / "ops" / "localstack.py"), "up"], check=True)
    values = {}
    for line in (RUN / "stack.env").read_text().splitlines():
        key, _, value = line.partition("=")
        values[key] = value
    return values


class OrderGenerator(threading.Thread):
    """Writes a small order lifecycle per order (placed, paid, shipped or cancelled) at a steady rate."""

    def __init__(self, db_url: str, rate: float, duration: float) -> None:
        super().__init__(daemon=True)
        self.engine = create_engine(db_url)
        self.rate = rate
        self.duration = duration
        self.written = 0
        self.orders: list[str] = []

    def _event(self) -> dict[str, Any]:
        if not self.orders or random.random() < 0.35:
            order_id = f"order-{uuid.uuid4().hex[:8]}"
            self.orders.append(order_id)
            payload = (f'{{"order_id":"{order_id}","customer":"c-{random.randint(1, 50)}",'
                       f'"amount":{random.randint(5, 500)}.{random.randint(0, 99):02d},"currency":"EUR"}}')
            return {"aggregate_id": order_id, "event_type": "OrderPlaced", "payload": payload}
        order_id = random.choice(self.orders)
        kind = random.choices(["OrderPaid", "OrderShipped", "OrderCancelled"], weights=[5, 4, 1])[0]
        detail = {"OrderPaid": '"amount":10.00', "OrderShipped": '"carrier":"dhl"',
                  "OrderCancelled": '"reason":"customer"'}[kind]
        return {"aggregate_id": order_id, "event_type": kind, "payload": f'{{"order_id":"{order_id}",{detail}}}'}

    def run(self) -> None:
        insert = text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                      "VALUES (:event_id, 'order', :aggregate_id, :event_type, :payload)")
        deadline = time.monotonic() + self.duration
        batch = max(1, int(self.rate / 10))
        while time.monotonic() < deadline:
            rows = [{"event_id": str(uuid.uuid4()), **self._event()} for _ in range(batch)]
            with self.engine.begin() as conn:
                conn.execute(insert, rows)
            self.written += len(rows)
            time.sleep(0.1)
        self.engine.dispose()


def kafka_count(consumer: Consumer, topic: str) -> int:
    try:
        metadata = consumer.list_topics(topic, timeout=5)
    except KafkaException:  # not created yet
        return 0
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        return 0
    total = 0
    for partition in metadata.topics[topic].partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
        total += high - low
    return total


def watermark(db_url: str, bridge_name: str) -> int:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        value = conn.execute(text("SELECT watermark FROM bridge_offsets WHERE bridge_name = :n"),
                             {"n": bridge_name}).scalar()
    engine.dispose()
    return int(value or 0)


def render(rows: list[tuple[str, str]]) -> Table:
    table = Table(title="outbox demo: SQLite outbox → bridge → Kafka → Spark → Delta")
    table.add_column("stage", style="bold")
    table.add_column("count", justify="right")
    for stage, value in rows:
        table.add_row(stage, value)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="events per second written (default 200)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of writing (default 30)")
    parser.add_argument("--no-spark", action="store_true", help="stop at Kafka, skip the projection")
    args = parser.parse_args(argv)

    env = stack_env()
    demo_dir = RUN / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    db_path = demo_dir / "outbox.db"
    db_path.unlink(missing_ok=True)
    db_url = f"sqlite:///{db_path}"
    upgrade(db_url)
    run_id = uuid.uuid4().hex[:6]
    topic_template = f"demo{run_id}.{{aggregate_type}}"
    topic = topic_template.replace("{aggregate_type}", "order")
    lake = Path(env.get("PROJECTIONS_LAKE_PATH", RUN / "lake")) / f"demo-{run_id}"
    console.print(f"[bold]outbox[/] {db_url}\n[bold]kafka[/]  {env['KAFKA_BOOTSTRAP_SERVERS']} topic {topic}\n"
                  f"[bold]lake[/]   {lake}")

    bridge_env = {
        **os.environ,
        "OUTBOX_DB_URL": db_url,
        "KAFKA_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"],
        "BRIDGE_NAME": "demo",
        "BRIDGE_TOPIC_TEMPLATE": topic_template,
        "BRIDGE_ALLOW_SINGLE_BROKER": "true",
        "BRIDGE_REPLICATION_FACTOR": "1",
        "BRIDGE_METRICS_PORT": "0",
    }
    bridge_log = open(RUN / "logs" / "demo-bridge.log", "w")  # noqa: SIM115 - closed at the end
    bridge = subprocess.Popen([sys.executable, "-m", "bridge.cli", "run"], env=bridge_env,
                              stdout=bridge_log, stderr=subprocess.STDOUT)
    generator = OrderGenerator(db_url, args.rate, args.duration)
    generator.start()
    projection = None
    if not args.no_spark:
        from projections.demo import DemoProjection

        projection = DemoProjection(env["KAFKA_BOOTSTRAP_SERVERS"], topic, lake)
        projection.start()

    consumer = Consumer({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"], "group.id": f"demo-{run_id}"})
    published = 0
    try:
        with Live(render([]), console=console, refresh_per_second=2) as live:
            settle_deadline = None
            while True:
                published = kafka_count(consumer, topic)
                # Read each count once, so the frame shown and the decision to stop agree.
                writing, written = generator.is_alive(), generator.written
                rows = [
                    ("events written to the outbox", str(written)),
                    ("bridge watermark (persisted seq)", str(watermark(db_url, "demo"))),
                    ("records in Kafka", str(published)),
                ]
                projected = None
                if projection is not None:
                    projected = projection.event_count()
                    rows += [("events in the Delta event log", str(projected)),
                             ("orders in the latest-state table", str(projection.order_count()))]
                live.update(render(rows))
                done = not writing and published >= written and (projected is None or projected >= written)
                if done:
                    break
                if not generator.is_alive():
                    settle_deadline = settle_deadline or time.monotonic() + 120
                    if time.monotonic() > settle_deadline:
                        console.print("[red]the pipeline did not catch up within 120 s; see .run/logs/")
                        return 1
                if bridge.poll() is not None:
                    console.print(f"[red]the bridge exited with {bridge.returncode}; see .run/logs/demo-bridge.log")
                    return 1
                time.sleep(1)
        console.print(f"[green]all {generator.written} events reached Kafka"
                      + (" and the Delta projections" if projection is not None else "") + "[/]")
        if projection is not None:
            projection.show()
        return 0
    finally:
        consumer.close()
        if projection is not None:
            projection.stop()
        bridge.send_signal(signal.SIGTERM)
        bridge.wait(60)
        bridge_log.close()


if __name__ == "__main__":
    sys.exit(main())
