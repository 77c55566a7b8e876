"""`make demo`: the whole pipeline on embedded defaults, showing events flowing.

An order generator writes events into a SQLite outbox, the real bridge daemon (`outbox-bridge run`, a
subprocess) publishes them to the local Kafka broker, and a Spark projection fills a Delta table under
`.run/lake`. A live table (on a terminal) or a plain line every few seconds (in a pipe or a log) shows
each stage catching up.

The demo starts only Kafka from the local stack: its outbox is a SQLite file, so it needs no PostgreSQL.
Kafka stays running afterwards for the next run (`make down` stops it); the bridge and Spark stop with
the demo.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from confluent_kafka import Consumer, KafkaException, TopicPartition
from rich.console import Console
from rich.live import Live
from rich.table import Table
from sqlalchemy import create_engine, text

from bridge.migrate import upgrade

if TYPE_CHECKING:
    from projections.demo import DemoProjection

ROOT = Path(__file__).resolve().parent.parent
# The same run directory as ops/localstack.py, which honours OUTBOX_RUN_DIR too.
RUN = Path(os.environ.get("OUTBOX_RUN_DIR", ROOT / ".run")).resolve()
LOGS = RUN / "logs"
# Soft wrap: in a pipe the console is 80 columns wide, and a wrapped line would split a progress line in two.
console = Console(soft_wrap=True, highlight=False)
# In a pipe or a log file, one progress line this often (on a terminal the table refreshes in place).
PLAIN_PROGRESS_EVERY_S = 5.0


def say(message: str = "") -> None:
    console.print(message)


def introduction(with_spark: bool) -> str:
    """What the demo starts, what it leaves running and how to stop it, said before it starts anything."""
    lines = [
        "[bold]outbox demo[/]: orders written to a SQLite outbox, published to Kafka by the bridge"
        + (", projected into Delta tables by Spark." if with_spark else "."),
        "It starts:",
        "  - Kafka, one local broker (ops/localstack.py up --no-postgres) unless one is already running; it keeps",
        "    running after the demo, for the next run: [bold]make down[/] stops it",
        f"  - the bridge, `outbox-bridge run` as a subprocess (log: {LOGS / 'demo-bridge.log'});"
        " it stops with the demo",
    ]
    if with_spark:
        lines.append(
            f"  - Spark in this process, three projections (log: {LOGS / 'demo-spark.log'}); it stops with the demo"
        )
    lines.append("It does not start PostgreSQL: the demo's outbox is a SQLite file.")
    return "\n".join(lines)


def start_kafka() -> dict[str, str] | None:
    """Start the local stack's Kafka (idempotent, no PostgreSQL); return its stack.env, or None if it failed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "ops" / "localstack.py"), "up", "--no-postgres"], check=False
    )
    if result.returncode != 0:
        return None
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


class SparkStart(threading.Thread):
    """Starts the demo projections in the background: Spark takes about 20 s to come up, and the progress
    shows the bridge at work meanwhile."""

    def __init__(self, projection: DemoProjection) -> None:
        super().__init__(daemon=True)
        self.projection = projection
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self.projection.start()
        except Exception as exc:  # noqa: BLE001 - handed to the watch loop, which reports it and stops
            self.error = exc


class Stage(NamedTuple):
    """One row of the progress: how many events have reached this stage (None: not known yet)."""

    label: str
    short: str
    events: int | None


def shown(events: int | None) -> str:
    return "(Spark starting)" if events is None else str(events)


def render(frame: list[Stage]) -> Table:
    table = Table(title="outbox demo: SQLite outbox → bridge → Kafka → Spark → Delta")
    table.add_column("stage", style="bold")
    table.add_column("count", justify="right")
    for stage in frame:
        table.add_row(stage.label, shown(stage.events))
    return table


def progress_line(elapsed_s: float, frame: list[Stage]) -> str:
    """The plain form of a frame, for a pipe or a log file: one line, short names."""
    return f"[{elapsed_s:3.0f} s] " + " | ".join(f"{stage.short} {shown(stage.events)}" for stage in frame)


def leftovers(bootstrap: str, topic: str, lake: Path, db_path: Path) -> str:
    return "\n".join([
        f"Still running: Kafka at {bootstrap}, kept for the next run; [bold]make down[/] stops it "
        "(`make status` shows it).",
        f"Left on disk: the outbox {db_path}, the topic {topic} in Kafka, the Delta tables under {lake}; "
        "`make clean` removes them with the rest of .run.",
    ])


def watch(
    generator: OrderGenerator,
    bridge: subprocess.Popen[bytes],
    consumer: Consumer,
    topic: str,
    db_url: str,
    spark: SparkStart | None,
    started: float,
) -> tuple[bool, str]:
    """Show each stage catching up until every event is everywhere; return whether it did, and a summary."""
    live = Live(render([]), console=console, refresh_per_second=2) if console.is_terminal else None
    last_line = 0.0
    settle_deadline = None
    with live if live is not None else contextlib.nullcontext():
        while True:
            published = kafka_count(consumer, topic)
            # Read each count once, so the frame shown and the decision to stop agree.
            writing, written = generator.is_alive(), generator.written
            frame = [
                Stage("events written to the outbox", "written", written),
                Stage("bridge watermark (persisted seq)", "watermark", watermark(db_url, "demo")),
                Stage("records in Kafka", "in Kafka", published),
            ]
            projected = orders = None
            if spark is not None:
                if spark.error is not None:
                    return False, f"[red]Spark did not start: {spark.error}; see {LOGS / 'demo-spark.log'}[/]"
                if not spark.is_alive():
                    projected, orders = spark.projection.event_count(), spark.projection.order_count()
                frame += [Stage("events in the Delta event log", "in Delta", projected),
                          Stage("orders in the latest-state table", "live orders", orders)]
            done = (not writing and published >= written
                    and (spark is None or (projected is not None and projected >= written)))
            now = time.monotonic()
            if live is not None:
                live.update(render(frame))
            elif done or now - last_line >= PLAIN_PROGRESS_EVERY_S:
                say(progress_line(now - started, frame))
                last_line = now
            if done:
                where = "Kafka and the Delta projections" if spark is not None else "Kafka"
                return True, f"[green]demo done in {now - started:.0f} s: all {written} events reached {where}[/]"
            if not writing:
                settle_deadline = settle_deadline or now + 120
                if now > settle_deadline:
                    return False, f"[red]the pipeline did not catch up within 120 s; see {LOGS}[/]"
            if bridge.poll() is not None:
                return False, f"[red]the bridge exited with {bridge.returncode}; see {LOGS / 'demo-bridge.log'}[/]"
            time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="events per second written (default 200)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of writing (default 30)")
    parser.add_argument("--no-spark", action="store_true", help="stop at Kafka, skip the projection")
    args = parser.parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Whole lines, flushed as they are written: in a pipe they stay in order with what the stack and
        # Spark write to the same file, and none is cut in two by a block-sized flush.
        sys.stdout.reconfigure(line_buffering=True)
    started = time.monotonic()

    say(introduction(with_spark=not args.no_spark))
    say()
    env = start_kafka()
    if env is None:
        say("[red]the local Kafka did not start: see the lines from ops/localstack.py above; "
            "`make down` stops what did start[/]")
        return 1
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
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
    say(f"[bold]outbox[/] {db_url}\n[bold]kafka[/]  {bootstrap} topic {topic}\n[bold]lake[/]   {lake}")

    bridge_env = {
        **os.environ,
        "OUTBOX_DB_URL": db_url,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "BRIDGE_NAME": "demo",
        "BRIDGE_TOPIC_TEMPLATE": topic_template,
        "BRIDGE_ALLOW_SINGLE_BROKER": "true",
        "BRIDGE_REPLICATION_FACTOR": "1",
        "BRIDGE_METRICS_PORT": "0",
    }
    LOGS.mkdir(parents=True, exist_ok=True)
    bridge_log = open(LOGS / "demo-bridge.log", "w")  # noqa: SIM115 - closed at the end
    bridge = subprocess.Popen([sys.executable, "-m", "bridge.cli", "run"], env=bridge_env,
                              stdout=bridge_log, stderr=subprocess.STDOUT)
    generator = OrderGenerator(db_url, args.rate, args.duration)
    generator.start()
    say(f"writing {args.rate:.0f} events/s for {args.duration:.0f} s; the bridge publishes them as they commit")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-{run_id}"})
    spark = None
    if not args.no_spark:
        from projections.demo import DemoProjection

        say("starting Spark and the projections in the background; the Delta counts appear once it is up")
        spark = SparkStart(DemoProjection(bootstrap, topic, lake, spark_log=LOGS / "demo-spark.log"))
        spark.start()
    try:
        ok, summary = watch(generator, bridge, consumer, topic, db_url, spark, started)
        if ok and spark is not None:
            spark.projection.show()
    except KeyboardInterrupt:
        ok, summary = False, "[yellow]demo interrupted[/]"
    finally:
        say("stopping Spark and the bridge ..." if spark is not None else "stopping the bridge ...")
        consumer.close()
        if spark is not None:
            spark.join(120)  # a session half built cannot be stopped cleanly
            spark.projection.stop()
        bridge.send_signal(signal.SIGTERM)
        bridge.wait(60)
        bridge_log.close()
    say(summary)
    say(leftovers(bootstrap, topic, lake, db_path))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
