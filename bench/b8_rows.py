"""B8's correctness rows: order, rollbacks and crashes, each run for Debezium and for the bridge, same run.

Each row has its own database and topic per relay (bench/b8_relays.py); Debezium's rows run first in one
Connect worker (`poll.interval.ms=10` as in B8's other phases), then the bridge's, then the exactly-once
bridge's (`BRIDGE_DELIVERY=exactly-once`: its crash row must show 0 duplicates, and its latency is measured
to a read_committed consumer too). The topic is read back from the beginning with a plain consumer
(read_committed, librdkafka's default) once the relay has caught up.

- order: writers that do not lock the aggregate (bench/tx_writer.py: several connections, the same few
  aggregates, interleaved commits, some transactions held open before they commit). An inversion is a
  record whose `seq` header is lower than an earlier record's of the same key in the same partition.
  Debezium publishes in commit order, so it may show some; the bridge publishes in seq order: 0.
- rollbacks: the same writers, 30% of their transactions rolled back. Lost: a committed event_id not in
  the topic; leaked: a rolled-back event_id in it. Both must be 0 for both relays.
- latency: open-loop writers (bench/writer.py) at 1,000 and 5,000 events/s for b3_seconds; each event's
  commit to its record's LogAppendTime, p50/p99 (B3's measure), for the bridge and for Debezium with its
  default `poll.interval.ms` (500) and tuned (10).
- crash: a steady writer (as in B4) while the relay process is killed with SIGKILL (the Connect
  worker's JVM; `outbox-bridge run`) and started again, `b8_crashes` times. Lost must be 0; duplicates
  (copies of an event_id beyond the first) are reported per crash.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import asdict
from typing import Any, NamedTuple

from bench.b3_latency import commit_to_append, commit_to_visible
from bench.b4_crash import run_for
from bench.b8_debezium import DEBEZIUM_TUNING, PARTITIONS, CpuSpan, connect
from bench.b8_relays import EXACTLY_ONCE, BridgeRelay, DebeziumRelay, Lane, Relay
from bench.context import Context
from bench.stack import KAFKA1
from bench.topics import TopicWatch, VisibleTimes, header, read_all
from bench.tx_writer import Interleaving, write_interleaved
from bench.workload import Workload
from bench.writer import Schedule, WriterProcess, read_commits

log = logging.getLogger("bench.b8")

ORDER_KEYS = 8  # few aggregates, so concurrent transactions keep writing to the same ones
CRASH_KEYS = 10_000
ROLLBACK_SHARE = 0.3
LATENCY_RATES = (1_000, 5_000)
# Debezium's documented default poll.interval.ms is 500, set explicitly so the row says what it ran.
LATENCY_VARIANTS: dict[str, dict[str, dict[str, str]]] = {
    "debezium": {"default": {"poll.interval.ms": "500"}, "tuned": DEBEZIUM_TUNING},
    "bridge": {"default": {}},
    "bridge-exactly-once": {"default": {}},
}


class Record(NamedTuple):
    partition: int
    key: bytes
    seq: int
    event: int  # the event's index, from its event_id (`<prefix>-<index>`)


def read_records(topic: str) -> list[Record]:
    return [Record(msg.partition(), msg.key() or b"", int(header(msg, "seq") or b"0"),
                   int((header(msg, "event_id") or b"-0").decode().rsplit("-", 1)[1]))
            for msg in read_all(KAFKA1, topic)]


def inversions(records: Iterable[Record]) -> dict[str, int]:
    """Records whose seq is below an earlier record's of the same key in the same partition (offset order)."""
    highest: dict[tuple[int, bytes], int] = {}
    inverted: Counter[tuple[int, bytes]] = Counter()
    checked = 0
    for record in records:
        checked += 1
        where = (record.partition, record.key)
        if record.seq < highest.get(where, 0):
            inverted[where] += 1
        highest[where] = max(highest.get(where, 0), record.seq)
    return {"inversions": sum(inverted.values()), "aggregates_inverted": len(inverted),
            "events_checked": checked, "aggregates_checked": len(highest)}


def delivery(records: list[Record], committed: set[int], rolled_back: AbstractSet[int] = frozenset()) -> dict[str, int]:
    """Lost (committed, not in the topic), leaked (rolled back, in the topic) and duplicate copies."""
    copies = Counter(r.event for r in records)
    return {"records": len(records), "lost": len(committed - copies.keys()), "leaked": len(rolled_back & copies.keys()),
            "duplicates": sum(n - 1 for n in copies.values())}


def drain(topic: str, expected: int, timeout: float, check: Callable[[], None]) -> None:
    """Wait until the topic holds `expected` records (or `timeout`), then until it has been quiet for 3 s."""
    watch = TopicWatch(KAFKA1, topic)
    try:
        try:
            watch.wait_for(expected, timeout, check=check)
        except TimeoutError as exc:
            log.warning("B8: %s; counting what is there", exc)
        watch.settle(None, lambda: 0, head=0, timeout=60)
    finally:
        watch.close()


def interleaved_row(ctx: Context, relay: Relay, row: str, shape: Interleaving) -> dict[str, Any]:
    lane = relay.open(row)
    try:
        written = write_interleaved(lane.dsn, Workload(prefix=row, keys=ORDER_KEYS), shape, ctx.sizes.b8_row_seconds)
        drain(lane.topic, len(written.committed), timeout=300, check=relay.check)
    finally:
        relay.close()
    records = read_records(lane.topic)
    return {**written.summary(), **delivery(records, written.committed, written.rolled_back), **inversions(records)}


def crash_row(ctx: Context, relay: Relay) -> dict[str, Any]:
    lane: Lane = relay.open("crash")
    commits_file = ctx.raw(f"commits/b8-crash-{relay.name}.txt")
    writer = WriterProcess(lane.dsn, "crash", CRASH_KEYS,
                           Schedule.for_rate(ctx.sizes.b4_rate, 3600, max_tx_per_s=100, writers=1), commits_file)
    watch = TopicWatch(KAFKA1, lane.topic)
    rng = random.Random(8)
    samples: list[tuple[float, int]] = []
    kills: list[dict[str, Any]] = []
    try:
        for number in range(1, ctx.sizes.b8_crashes + 1):
            ran = rng.uniform(2.0, 5.0)
            run_for(relay.check, watch, ran, samples)
            relay.kill()
            killed = time.monotonic()
            relay.restart()
            kills.append({"crash": number, "ran_s": round(ran, 2), "back_after_s": round(time.monotonic() - killed, 1)})
            log.info("B8 %s: crash %d/%d after %.1fs, relaying again after %.1fs", relay.name, number,
                     ctx.sizes.b8_crashes, ran, kills[-1]["back_after_s"])
        writer.interrupt()
        written = writer.wait(timeout=120)
        drain(lane.topic, written["events"], timeout=600, check=relay.check)
    finally:
        if writer.process.poll() is None:
            writer.interrupt()
            writer.process.wait(60)
        watch.close()
        relay.close()
    counted = delivery(read_records(lane.topic), set(read_commits(commits_file)))
    return {"crashes": len(kills), "writer": written, **counted,
            "duplicates_per_crash": round(counted["duplicates"] / max(1, len(kills)), 1),
            "relaying_again_after_s": round(sum(k["back_after_s"] for k in kills) / max(1, len(kills)), 1),
            "kills": kills}


def latency_row(ctx: Context, relay: Relay, rate: int, variant: str, settings: Mapping[str, str]
                ) -> dict[str, Any]:
    """Open-loop writers at `rate` for b3_seconds; commit to the record's LogAppendTime, as in B3. A transactional
    relay's records are visible only once committed: measured too to when a read_committed consumer reading along
    got each (`visible_ms`, as B3-delivery)."""
    row = f"latency{rate}_{variant}"
    lane = relay.open(row, {"message.timestamp.type": "LogAppendTime"}, settings)
    records = ctx.raw(f"commits/b8-{row}-{relay.name}.txt")
    reader = VisibleTimes(KAFKA1, lane.topic, PARTITIONS) if relay.transactional else None
    seen = None
    try:
        cpu = StreamingCpu(relay)
        writer = WriterProcess(lane.dsn, row, CRASH_KEYS, Schedule.for_rate(rate, ctx.sizes.b3_seconds), records)
        written = writer.wait(timeout=ctx.sizes.b3_seconds * 10 + 120)
        if reader is not None:
            reader.wait_for(written["events"], timeout=300)
        else:
            drain(lane.topic, written["events"], timeout=300, check=relay.check)
        used = cpu.stop(written["events"])
    finally:
        relay.close()
        if reader is not None:
            seen = reader.stop()
    measured = commit_to_append(lane.topic, records, row)
    measured.pop("_histogram")
    if seen is not None:
        measured["visible_ms"] = commit_to_visible(seen, records)
    return {"settings": dict(settings), "writer": written, **measured, **used}


class StreamingCpu:
    """CPU the relay used while the writers ran and it caught up, its process and PostgreSQL's work for it, per
    100,000 events: what relaying a steady stream costs, beside the backlog phases' cost."""

    def __init__(self, relay: Relay) -> None:
        self._span = CpuSpan(relay.pid, relay.database_cpu())

    def stop(self, events: int) -> dict[str, float]:
        relay, database, wall = self._span.stop()
        per = 100_000 / max(events, 1)
        return {"relay_cpu_s_per_100k": round(relay * per, 2), "database_cpu_s_per_100k": round(database * per, 2),
                "relay_cores": round(relay / max(wall, 1e-6), 3)}


def latency_rows(ctx: Context, relay: Relay) -> dict[str, Any]:
    return {str(rate): {variant: latency_row(ctx, relay, rate, variant, settings)
                        for variant, settings in LATENCY_VARIANTS[relay.name].items()}
            for rate in LATENCY_RATES}


ORDER = Interleaving()
ROLLBACKS = Interleaving(hold_share=0.02, rollback_share=ROLLBACK_SHARE)
ROWS: dict[str, Callable[[Context, Relay], dict[str, Any]]] = {
    "order": lambda ctx, relay: interleaved_row(ctx, relay, "order", ORDER),
    "rollbacks": lambda ctx, relay: interleaved_row(ctx, relay, "rollbacks", ROLLBACKS),
    "latency": latency_rows,
    "crash": crash_row,  # last: it kills the Connect worker
}


def _run_relay(ctx: Context, relay: Relay) -> dict[str, Any]:
    outcomes: dict[str, Any] = {}
    try:
        for row, measure in ROWS.items():
            log.info("B8 %s: %s", relay.name, row)
            try:
                outcomes[row] = measure(ctx, relay)
            except Exception as exc:  # noqa: BLE001 - one failed row is reported, the others still run
                log.error("B8 %s %s failed: %s", relay.name, row, exc)
                outcomes[row] = {"error": f"{type(exc).__name__}: {exc}"}
            log.info("B8 %s %s: %s", relay.name, row, {k: v for k, v in outcomes[row].items() if k != "kills"})
    finally:
        relay.shutdown()
    return outcomes


def meets_target(rows: dict[str, dict[str, Any]]) -> bool:
    """The bridge inverts nothing; no relay loses a committed event or publishes a rolled-back one; the exactly-once
    bridge's read_committed consumers see no duplicate after a crash."""
    relays = [relay for relay in RELAYS if relay in rows["crash"]]
    counted = [rows[row][relay] for row in ("order", "rollbacks", "crash") for relay in relays]
    if any("error" in outcome for outcome in counted):
        return False
    bridges = [relay for relay in relays if relay != "debezium"]
    return (all(rows["order"][relay]["inversions"] == 0 for relay in bridges)
            and not any(o["lost"] or o["leaked"] for o in counted)
            and all(rows["crash"][relay]["duplicates"] == 0 for relay in bridges if relay.endswith("exactly-once")))


#: The relays, in the order they run: each has every row (`ROWS`).
RELAYS = ("debezium", "bridge", "bridge-exactly-once")


def run(ctx: Context) -> dict[str, Any]:
    connect.ensure_jars()
    debezium = DebeziumRelay(ctx)
    relays: tuple[Relay, ...] = (debezium, BridgeRelay(ctx), BridgeRelay(ctx, "bridge-exactly-once", EXACTLY_ONCE))
    assert tuple(relay.name for relay in relays) == RELAYS
    by_relay = {relay.name: _run_relay(ctx, relay) for relay in relays}
    rows = {row: {name: outcomes[row] for name, outcomes in by_relay.items()} for row in ROWS}
    return {
        "target": "bridge: 0 inversions; every relay: 0 lost, 0 rolled-back events published; the exactly-once "
                  "bridge: 0 duplicates after crashes, read_committed",
        "meets_target": meets_target(rows),
        "row_seconds": ctx.sizes.b8_row_seconds,
        "order_aggregates": ORDER_KEYS,
        "order_writers": asdict(ORDER),
        "rollbacks_writers": asdict(ROLLBACKS),
        "crash_writer_rate": ctx.sizes.b4_rate,
        "latency_seconds": ctx.sizes.b3_seconds,
        "debezium_tuning": dict(DEBEZIUM_TUNING),
        # Debezium confirms its slot's position when the worker commits source offsets: a kill re-sends all
        # it published since the last commit.
        "connect_offset_flush_ms": debezium.worker.offset_flush_ms,
        "rows": rows,
    }
