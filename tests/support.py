"""Helpers shared by integration tests: run a bridge in a thread, write events, read a topic back."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection

from bridge.config import BridgeConfig, load_config
from bridge.core.records import KafkaRecord
from bridge.daemon import BridgeDaemon, build_daemon
from bridge.kafka.testing import AcceptingTopicGuard, publisher_factory
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetRow, OffsetStore
from bridge.store.reader import Batch, TailReader
from tests.dialects import writer_sql


class Tail:
    """A reader driven as the daemon drives it: each read starts after the last seq it delivered."""

    def __init__(self, reader: TailReader[Any], cursor: int = 0) -> None:
        self.reader = reader
        self.cursor = cursor

    def poll(self, limit: int = 100) -> Batch:
        batch = self.reader.poll(self.cursor, limit)
        if batch.rows:
            # Settled holes always come before a delivered row, so the last row is where the read ends.
            self.cursor = batch.rows[-1].seq
        return batch


def bridge_config(db_url: str, bootstrap: str, **overrides: Any) -> BridgeConfig:
    """A bridge configuration for tests: unique topics, a one-broker cluster allowed, no metrics port."""
    flags: dict[str, Any] = {
        "db_url": db_url,
        "bootstrap_servers": bootstrap,
        "bridge_name": f"b-{uuid.uuid4().hex[:8]}",
        "topic_template": f"t{uuid.uuid4().hex[:8]}.{{aggregate_type}}",
        "allow_single_broker": True,
        "replication_factor": 1,
        "topic_partitions": 3,
        "metrics_port": 0,
        "persist_interval_s": 0.2,
        "lease_timeout_s": 3.0,
    }
    flags.update(overrides)
    return load_config(flags=flags, env={})


@dataclass
class RunningBridge:
    daemon: BridgeDaemon
    thread: threading.Thread
    result: list[int]

    def stop(self, timeout: float = 60) -> int:
        self.daemon.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "bridge did not stop"
        return self.result[0]

    def where(self) -> str:
        """Where the bridge's thread is now (its innermost frames), for a failure message: a wait that times out
        says what the daemon was doing instead of only that it did not get there."""
        frame = sys._current_frames().get(self.thread.ident or -1)
        if frame is None:
            return f"the bridge's thread has ended (returned {self.result})"
        return "the bridge's thread is at:\n" + "".join(traceback.format_stack(frame)[-10:])


@contextmanager
def running(bridge: RunningBridge) -> Iterator[RunningBridge]:
    """The bridge, stopped when the block ends, whatever happened in it."""
    try:
        yield bridge
    finally:
        if bridge.thread.is_alive():
            bridge.stop()


def start_bridge(config: BridgeConfig, **kwargs: Any) -> RunningBridge:
    daemon = build_daemon(config, **kwargs)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()), daemon=True)
    thread.start()
    return RunningBridge(daemon, thread, result)


def start_unit_bridge(db_url: str, name: str, delivered: list[KafkaRecord], **flags: Any) -> RunningBridge:
    """The whole daemon on `db_url` with an in-memory publisher that acknowledges into `delivered` and a topic
    guard that accepts every topic: no broker, no metrics port."""
    config = load_config(flags={"db_url": db_url, "bridge_name": name, "topic_template": "u.{aggregate_type}",
                                "allow_single_broker": True, "replication_factor": 1, "metrics_port": 0, **flags},
                         env={})
    return start_bridge(config, publisher_factory=publisher_factory(delivered), topic_guard=AcceptingTopicGuard(),
                        instance_id=name)


def insert_events(db_url: str, count: int, aggregate_type: str = "order", aggregates: int = 10,
                  start: int = 0) -> None:
    """Insert events with plain SQL, as any application would."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO domain_events (event_id, aggregate_type, aggregate_id, event_type, payload) "
                 "VALUES (:event_id, :aggregate_type, :aggregate_id, :event_type, :payload)"),
            [
                {"event_id": f"e-{start + i}-{uuid.uuid4().hex[:6]}", "aggregate_type": aggregate_type,
                 "aggregate_id": f"a-{(start + i) % aggregates}", "event_type": "OrderPlaced",
                 "payload": f'{{"n": {start + i}, "note": "x"}}'}
                for i in range(count)
            ],
        )
    engine.dispose()


# ------------------------------------------------------------------- writers that commit out of seq order

#: Share of transactions that draw their seqs, then wait 50-500 ms before committing while later ones commit.
LATE_SHARE = 0.3


@dataclass
class Ledger:
    """What the writers committed, as they saw it."""

    seed: int = 0
    committed: dict[int, str] = field(default_factory=dict)  # seq -> event_id
    # (commit time, lowest seq of the transaction): to count commits that came after a higher seq's.
    commits: list[tuple[float, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def late_commits(self) -> int:
        """Transactions that committed after one holding a higher seq had committed."""
        late, highest = 0, 0
        for _, low in sorted(self.commits):
            late += low < highest
            highest = max(highest, low)
        return late


def _insert(conn: Connection, rng: random.Random, aggregates: int) -> tuple[int, str]:
    event_id = f"e-{uuid.uuid4().hex}"
    seq = writer_sql(conn).insert(conn, event_id, "order", f"a-{rng.randrange(aggregates)}",
                                  json.dumps({"n": rng.randrange(1000)}), event_type="OrderPlaced")
    return seq, event_id


def _write(url: str, rng: random.Random, deadline: float, ledger: Ledger, aggregates: int) -> None:
    """One application thread: transactions of 1-3 events, some of them slow to commit; never a rollback."""
    engine = create_engine(url, pool_size=1)
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn, conn.begin():
                events = [_insert(conn, rng, aggregates) for _ in range(rng.randint(1, 3))]
                if rng.random() < LATE_SHARE:
                    time.sleep(rng.uniform(0.05, 0.5))
            with ledger.lock:
                ledger.committed.update(events)
                ledger.commits.append((time.monotonic(), min(seq for seq, _ in events)))
            time.sleep(rng.uniform(0, 0.02))
    except Exception as exc:  # noqa: BLE001 - a failed writer rolled back: recorded, and the test fails on it
        with ledger.lock:
            ledger.errors.append(repr(exc))
    finally:
        engine.dispose()


def write_out_of_seq_order(url: str, writers: int, seconds: float, aggregates: int) -> Ledger:
    """`writers` threads insert 'order' events for `seconds` over `aggregates` aggregates (a-0, a-1, ...),
    directly into the database (PostgreSQL or SQL Server: `tests.dialects`), some transactions committing
    after later seqs'; never a rollback."""
    ledger = Ledger(seed=random.randrange(1 << 30))
    deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=_write, args=(url, random.Random(ledger.seed + i), deadline, ledger,
                                                     aggregates), daemon=True)
               for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 10)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    return ledger


def head_seq(db_url: str) -> int:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        value = conn.execute(text("SELECT max(seq) FROM domain_events")).scalar()
    engine.dispose()
    return int(value or 0)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               context: Callable[[], str] | None = None) -> None:
    """Wait for `predicate`; on timeout fail naming `what`, and what `context` says then (`RunningBridge.where`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f"\n{context()}" if context else ""))


def topic_configs(bootstrap: str, topic: str, timeout: float = 30) -> dict[str, str]:
    """A topic's configs. On a cluster of several brokers, the one answering DescribeConfigs may not know a topic
    the controller just created (UNKNOWN_TOPIC_OR_PART) for a moment: that is waited out, as the bridge's own
    `TopicGuard.settle` does."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._config import ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        try:
            described = next(iter(admin.describe_configs([ConfigResource("topic", topic)]).values())).result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
            continue
        return {name: entry.value for name, entry in described.items()}


def read_topic(bootstrap: str, topic: str, *, timeout: float = 120, isolation_level: str = "read_committed",
               conf: dict[str, Any] | None = None) -> list[Message]:
    """Every record in `topic` when the call starts, as a plain consumer reads it: partition after partition,
    each in offset order. A topic that does not exist (yet) has none. Fails if they are not read in `timeout`.
    `conf`: more client settings (a secured cluster's)."""
    consumer = Consumer({**(conf or {}), "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "isolation.level": isolation_level, "fetch.wait.max.ms": 50})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        by_partition: dict[int, list[Message]] = {p: [] for p in partitions}
        position = dict.fromkeys(partitions, 0)
        deadline = time.monotonic() + timeout
        while any(position[p] < ends[p] for p in partitions):
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic} timed out at offsets {position} of {ends}")
            # Batches, not one poll per record: some tests read hundreds of thousands.
            for msg in consumer.consume(num_messages=10_000, timeout=0.1):
                partition, offset, error = msg.partition(), msg.offset(), msg.error()
                if partition is None or offset is None:
                    continue
                if error is None:
                    by_partition[partition].append(msg)
                    position[partition] = offset + 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    # The end, though the last offsets may be transaction markers, which no consumer is given.
                    position[partition] = max(position[partition], offset)
    finally:
        consumer.close()
    for partition, messages in by_partition.items():
        offsets = [m.offset() for m in messages]
        assert offsets == sorted(set(offsets)), f"partition {partition} of {topic} read once, in offset order"
    return [m for p in partitions for m in by_partition[p]]


# ------------------------------------------------------------------------------ the daemon as a process

BRIDGE_SCRIPT = Path(sys.executable).with_name("outbox-bridge")


def bridge_env(db_url: str, bootstrap: str, bridge_name: str, topic_template: str, **settings: Any) -> dict[str, str]:
    """Environment for `outbox-bridge run` on a development cluster: the inherited environment without
    any OUTBOX_/BRIDGE_/KAFKA_ setting, then these; `settings` are BRIDGE_* names without the prefix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "BRIDGE_", "KAFKA_"))}
    env.update({
        "OUTBOX_DB_URL": db_url,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "BRIDGE_NAME": bridge_name,
        "BRIDGE_TOPIC_TEMPLATE": topic_template,
        "BRIDGE_ALLOW_SINGLE_BROKER": "true",
        "BRIDGE_REPLICATION_FACTOR": "1",
        "BRIDGE_METRICS_PORT": "0",
    })
    env.update({f"BRIDGE_{name.upper()}": str(value) for name, value in settings.items()})
    return env


@dataclass
class BridgeProcess:
    """One `outbox-bridge run` subprocess, its JSON-lines log in a file."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        """kill -9, and reap it."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for raw in self.log_path.read_text(errors="replace").splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                lines.append({"msg": raw})
        return lines

    def logged(self, message: str) -> bool:
        return any(line.get("msg") == message for line in self.log_lines())

    def stop_if_running(self) -> None:
        if self.alive():
            self.kill()


def spawn_bridge(env: dict[str, str], log_path: Path) -> BridgeProcess:
    """Start `outbox-bridge run` with env, logging to log_path (appended)."""
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([str(BRIDGE_SCRIPT), "run"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    return BridgeProcess(proc, log_path)


def read_offsets(db_url: str, bridge_name: str) -> OffsetRow | None:
    """The bridge's row in bridge_offsets, as a new reader sees it."""
    engine = make_engine(db_url)
    try:
        return OffsetStore(engine, bridge_name).read()
    finally:
        engine.dispose()


def outbox_row_count(db_url: str) -> int:
    """How many rows `domain_events` holds (what retention and cleanup left)."""
    from sqlalchemy import func, select

    from bridge.schema import domain_events
    from bridge.store.engine import make_engine

    engine = make_engine(db_url)
    with engine.connect() as conn:
        count = int(conn.execute(select(func.count()).select_from(domain_events)).scalar() or 0)
    engine.dispose()
    return count


def persisted_watermark(db_url: str, bridge_name: str) -> int:
    row = read_offsets(db_url, bridge_name)
    return row.watermark if row else 0


def record_seq(message: Any) -> int:
    return int(dict(message.headers())["seq"])


def seq_counts(records: list[Any]) -> Counter[int]:
    """How many times each seq is in the records."""
    return Counter(record_seq(m) for m in records)


def committed_seqs(db_url: str) -> list[int]:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        seqs = [int(r[0]) for r in conn.execute(text("SELECT seq FROM domain_events ORDER BY seq"))]
    engine.dispose()
    return seqs


def keys_in_seq_order(records: list[Any]) -> dict[bytes, list[int]]:
    """Per key, the seqs in the order a consumer of each partition reads them."""
    by_key: dict[bytes, list[int]] = {}
    for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
        by_key.setdefault(m.key(), []).append(record_seq(m))
    return by_key


# ------------------------------------------------------------------------------- least-privilege roles


@dataclass
class Roles:
    """The two group roles of `outbox-bridge grants`, and a login in each; URLs carry the logins' passwords."""

    admin_url: str
    writer: str
    bridge: str
    writer_url: str = ""
    bridge_url: str = ""
    passwords: dict[str, str] = field(default_factory=dict)

    def grant(self, *flags: str) -> None:
        """`outbox-bridge grants` applied as the admin, with these flags (e.g. --retention)."""
        from bridge.cli import main

        code = main(["grants", "--db-url", self.admin_url, "--writer-role", self.writer,
                     "--bridge-role", self.bridge, *flags])
        assert code == 0, f"outbox-bridge grants {' '.join(flags)} exited {code}"


def login_url(url: str, user: str, password: str) -> str:
    """`url` logging in as `user` with `password`."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(username=user, password=password).render_as_string(hide_password=False)


@contextmanager
def least_privilege_roles(admin_url: str) -> Iterator[Roles]:
    """On a migrated outbox: the roles of `outbox-bridge grants` (no retention), a login with a random
    password in each, all dropped at the end (roles are cluster-wide: names are unique per call)."""
    suffix = uuid.uuid4().hex[:8]
    roles = Roles(admin_url, writer=f"w_{suffix}", bridge=f"b_{suffix}")
    roles.grant("--no-retention")
    logins = {f"app_{suffix}": roles.writer, f"relay_{suffix}": roles.bridge}
    roles.passwords = {login: uuid.uuid4().hex for login in logins}
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for login, group in logins.items():
            conn.execute(text(f"CREATE ROLE {login} LOGIN PASSWORD '{roles.passwords[login]}' IN ROLE {group}"))
    roles.writer_url = login_url(admin_url, f"app_{suffix}", roles.passwords[f"app_{suffix}"])
    roles.bridge_url = login_url(admin_url, f"relay_{suffix}", roles.passwords[f"relay_{suffix}"])
    try:
        yield roles
    finally:
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(:names)"),
                         {"names": list(logins)})
            for role in [*logins, roles.writer, roles.bridge]:
                conn.execute(text(f"DROP OWNED BY {role}"))
                conn.execute(text(f"DROP ROLE {role}"))
        admin.dispose()
