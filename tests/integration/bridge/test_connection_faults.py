"""The bridge's database connections cut while writers commit out of seq order, on every backend.

PostgreSQL: the bridge reaches the server only through `tests.faultproxy`, which cuts a connection (both
sides, as a restart, failover or network drop does) at ROLLBACK or COMMIT (the lease and the watermark;
the reads run in autocommit on a kept connection), halfway through a result (the reads), or when a
notification is due on its LISTEN connection.
SQL Server: the suite cannot read TDS (inside TLS, usually), so `tests.tcpproxy.ChunkProxy` cuts by
position: request chunks, reply chunks or both, after each connection's login, at chunk boundaries drawn
with a fixed seed; a cut request never reaches the server, a cut reply reaches the bridge only in part.
A read is several round trips (the pre-ping, MIN_ACTIVE_ROWVERSION(), the rows, @@DBTS, the closing
rollback), so over a run the cuts land at every step of it, and in lease renewals and watermark commits.
The writers go to the database directly, commit out of seq order and never roll back, so there is no
hole to settle: every committed event must reach Kafka, in seq order per aggregate, and the persisted
watermark must never pass an event that did not.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from bridge.core.watermark import AckTracker
from bridge.kafka.publisher import KafkaPublisher
from bridge.migrate import upgrade
from tests.faultproxy import Cut, FaultProxy, Moment
from tests.support import (
    Ledger,
    bridge_config,
    committed_seqs,
    keys_in_seq_order,
    persisted_watermark,
    read_topic,
    record_seq,
    running,
    start_bridge,
    wait_until,
    write_out_of_seq_order,
)
from tests.tcpproxy import ChunkCut, ChunkProxy, Stream, TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

WRITERS = 8
WRITE_FOR_S = 12.0
AGGREGATES = 20

CUTS = {
    "rollback": Cut(Moment.ROLLBACK, every=7),
    "mid-result": Cut(Moment.MID_RESULT, every=5, after_rows=2),
    "commit": Cut(Moment.COMMIT, every=7),
    "listening": Cut(Moment.LISTENING, every=3),
}

#: Chunks of each stream a SQL Server connection carries before it may be cut: a login is about four each
#: way (PRELOGIN, the TLS handshake inside PRELOGIN packets, LOGIN7 and its answer). A cut inside a login
#: would only test "the server is unreachable", and too many would starve the bridge of whole reads.
LOGIN_CHUNKS = 8
#: The draws of which chunks are cut and of how much of a cut reply gets through: fixed, so a run replays.
#: Drawn rather than every n-th: a fixed period can fall into step with the bridge's loop (n chunks a
#: turn) and cut the same step of every read forever, a stall rather than a test.
SEED = 20261123

MSSQL_CUTS = {
    "reply": ChunkCut(Stream.REPLY, after=LOGIN_CHUNKS, chance=0.08, seed=SEED),
    "request": ChunkCut(Stream.REQUEST, after=LOGIN_CHUNKS, chance=0.08, seed=SEED),
    "either": ChunkCut(None, after=LOGIN_CHUNKS, chance=0.04, seed=SEED),
}


@dataclass
class Run:
    """What one run under cuts left behind: the writers' ledger, the topic, the persisted watermarks."""

    ledger: Ledger
    head: int
    records: list[Any]
    watermarks: list[int]
    holes_settled: int
    reports: list[tuple[int, int, str | None, int, int]]
    tracked: list[int]

@contextmanager
def _sampling_watermark(url: str, bridge_name: str, every_s: float = 0.1) -> Iterator[list[int]]:
    """The persisted watermark, read directly (not through the proxy) every `every_s` until the block ends."""
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            samples.append(persisted_watermark(url, bridge_name))

    thread = threading.Thread(target=sample, name="watermark-sampler", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(10)
        samples.append(persisted_watermark(url, bridge_name))


@contextmanager
def _recording_deliveries() -> Iterator[tuple[list[tuple[int, int, str | None, int, int]], list[int]]]:
    """Every delivery report the bridge's producers give, as (seq, generation, error, partition, offset),
    and every seq the daemon tracked as sent: when an event is lost, they say whether the bridge sent it,
    whether Kafka acknowledged it, and where Kafka put it."""
    reports: list[tuple[int, int, str | None, int, int]] = []
    tracked: list[int] = []
    original = KafkaPublisher._delivered
    original_track = AckTracker.track

    def recording(self: KafkaPublisher, seq: int, generation: int, err: Any, msg: Any) -> None:
        reports.append((seq, generation, None if err is None else err.name(), msg.partition(), msg.offset()))
        original(self, seq, generation, err, msg)

    def track(self: AckTracker, seq: int, size_bytes: int) -> None:
        tracked.append(seq)
        original_track(self, seq, size_bytes)

    KafkaPublisher._delivered = recording  # type: ignore[method-assign]
    AckTracker.track = track  # type: ignore[method-assign]
    try:
        yield reports, tracked
    finally:
        KafkaPublisher._delivered = original  # type: ignore[method-assign]
        AckTracker.track = original_track  # type: ignore[method-assign]


def _where_lost(run: Run, lost: list[int]) -> str:
    """For the first lost seqs: whether the bridge tracked them, their delivery reports, and what each
    partition of the topic holds (offsets read, first and last), to tell a skip from a lost record."""
    if not lost:
        return ""
    tracked = set(run.tracked)
    lines = [f"\n  tracked {len(run.tracked)} sends ({len(tracked)} distinct seqs)"]
    for seq in lost[:5]:
        lines.append(f"\n  seq {seq}: tracked {run.tracked.count(seq)}x, reports "
                     f"{[r for r in run.reports if r[0] == seq]}")
    by_partition: dict[int, list[int]] = {}
    for message in run.records:
        by_partition.setdefault(message.partition(), []).append(message.offset())
    for partition, offsets in sorted(by_partition.items()):
        offsets.sort()
        missing = sorted(set(range(offsets[0], offsets[-1] + 1)) - set(offsets))
        lines.append(f"\n  partition {partition}: {len(offsets)} records read, offsets {offsets[0]}..{offsets[-1]}, "
                     f"missing offsets {missing[:10]}")
    acked_at = {(r[3], r[4]) for r in run.reports if r[2] is None}
    read_at = {(m.partition(), m.offset()) for m in run.records}
    lines.append(f"\n  acknowledged at offsets not read back: {sorted(acked_at - read_at)[:10]}")
    return "".join(lines)


def _named(counts: Counter[Any]) -> dict[str, int]:
    return {moment.value: count for moment, count in counts.items()}


def _publish_while_cut(url: str, proxied_url: str, kafka_bootstrap: str) -> Run:
    """Writers commit out of seq order into `url` while a bridge reading `proxied_url` publishes, until the
    persisted watermark reaches the head seq; the bridge is stopped before this returns."""
    upgrade(url)
    config = bridge_config(proxied_url, kafka_bootstrap, persist_interval_s=0.2)
    with (_recording_deliveries() as (reports, tracked), _sampling_watermark(url, config.bridge_name) as watermarks,
          running(start_bridge(config)) as bridge):
        ledger = write_out_of_seq_order(url, WRITERS, WRITE_FOR_S, AGGREGATES)
        head = max(ledger.committed)
        # The persisted watermark, not the daemon's own state: it is what a restart resumes from.
        wait_until(lambda: bool(watermarks) and watermarks[-1] >= head, 45,
                   f"the persisted watermark to reach the head seq {head}")
        assert bridge.stop() == 0
    records = read_topic(kafka_bootstrap, config.topic_for("order"))
    return Run(ledger, head, records, watermarks, bridge.daemon.holes_settled, reports, tracked)


def _assert_nothing_lost(run: Run, url: str, label: str, proxy: TcpProxy, detail: str = "") -> None:
    """Every committed event in Kafka, in seq order per aggregate; no hole settled; the persisted
    watermark never at or above an event that is not in Kafka."""
    published = {record_seq(m) for m in run.records}
    committed = set(run.ledger.committed)
    lost = sorted(committed - published)
    past_a_lost_event = [w for w in run.watermarks if lost and w >= lost[0]]
    print(f"\n[{label}] writer seed {run.ledger.seed}: {len(committed)} committed (head {run.head}), "
          f"{run.ledger.late_commits()} commits after a higher seq's; proxy saw {_named(proxy.seen)}, "
          f"cut {_named(proxy.cuts)} over {proxy.connections} connections; {len(published)} published, "
          f"{len(lost)} lost (first {lost[:5]}), {run.holes_settled} holes settled, "
          f"{len(run.records) - len(published)} duplicates; persisted watermark max {max(run.watermarks, default=0)}, "
          f"{len(past_a_lost_event)} of {len(run.watermarks)} samples at or above a lost seq{detail}"
          f"{_where_lost(run, lost)}")

    assert not run.ledger.errors, f"a writer failed (and rolled back): {run.ledger.errors[:3]}"
    assert run.ledger.late_commits() > 0, "the schedule committed out of seq order"
    assert committed == set(committed_seqs(url)), "the ledger is what the database holds"
    assert not lost, f"{len(lost)} committed events never reached Kafka, first {lost[:10]}"
    assert published <= committed, "only committed events are published"
    assert run.holes_settled == 0, "writers never roll back, so no hole is settled"
    assert not past_a_lost_event, "the persisted watermark never passes an event that is not in Kafka"
    for key, seqs in keys_in_seq_order(run.records).items():
        first_deliveries = list(dict.fromkeys(seqs))
        assert first_deliveries == sorted(first_deliveries), f"aggregate {key!r}: events out of seq order {seqs}"


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_a_bridge_whose_connections_are_cut_publishes_every_committed_event_and_settles_no_hole(
    postgres_url: str, kafka_bootstrap: str, cut: Cut
) -> None:
    server = make_url(postgres_url)
    with FaultProxy((server.host or "127.0.0.1", server.port or 5432), cut) as proxy:
        run = _publish_while_cut(postgres_url, proxy.url_for(postgres_url), kafka_bootstrap)

    assert proxy.cuts[cut.moment] > 0, f"the proxy cut the bridge's connections at {cut.moment.value}"
    _assert_nothing_lost(run, postgres_url, cut.moment.value, proxy,
                         f"; client statements {dict(proxy.statements.most_common(8))}")


@pytest.mark.sqlserver
@pytest.mark.parametrize("cut", MSSQL_CUTS.values(), ids=MSSQL_CUTS.keys())
def test_a_bridge_whose_sql_server_connections_are_cut_at_chunk_boundaries_publishes_every_committed_event(
    sqlserver_url: str, kafka_bootstrap: str, cut: ChunkCut
) -> None:
    server = make_url(sqlserver_url)
    with ChunkProxy((server.host or "127.0.0.1", server.port or 1433), cut, seed=SEED) as proxy:
        run = _publish_while_cut(sqlserver_url, proxy.url_for(sqlserver_url), kafka_bootstrap)

    label = "either stream" if cut.moment is None else f"{cut.moment.value} chunks"
    assert sum(proxy.cuts.values()) > 0, f"the proxy cut the bridge's connections ({label})"
    _assert_nothing_lost(run, sqlserver_url, f"mssql {label}", proxy)
