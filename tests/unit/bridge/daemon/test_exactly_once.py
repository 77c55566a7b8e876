"""A term in exactly-once delivery, on the in-memory outbox, lease store and transactional broker: the watermark
never runs ahead of what Kafka committed, a restart resumes after what Kafka committed, a dead leader's open
transaction never becomes visible, a fenced producer ends the process (exit 11), and a failed transaction is sent
again without a duplicate reaching a `read_committed` consumer."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from bridge.config import BridgeConfig, DeliveryMode
from bridge.core.records import KafkaRecord
from bridge.daemon import EXIT_OK, BridgeDaemon
from bridge.exits import EXIT_FENCED
from bridge.kafka.testing import AcceptingTopicGuard, InMemoryCoordinator, InMemoryTransactionalPublisher, Verdict
from bridge.store.lease import Lease
from bridge.store.testing import InMemoryLeaseStore, InMemoryOutbox

pytestmark = pytest.mark.unit

CONFIG = BridgeConfig(allow_single_broker=True, replication_factor=1, persist_interval_s=0.01,
                      poll_interval_min_ms=1, poll_interval_max_ms=1, delivery=DeliveryMode.EXACTLY_ONCE,
                      transaction_max_events=3, transaction_interval_ms=20)
SCENARIO_LIMIT_S = 20.0


class CheckedStore(InMemoryLeaseStore):
    """A lease store that records, at every persist, the watermark written and what Kafka had committed."""

    def __init__(self, coordinator: InMemoryCoordinator, watermark: int = 0) -> None:
        super().__init__(watermark=watermark)
        self.coordinator = coordinator
        self.written: list[tuple[int, int]] = []

    def persist(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], **kw: Any) -> None:
        self.written.append((watermark, self.coordinator.progress or 0))
        super().persist(lease, watermark, lease_seconds, status, **kw)


def _daemon(outbox: InMemoryOutbox, store: InMemoryLeaseStore, coordinator: InMemoryCoordinator,
            made: list[InMemoryTransactionalPublisher] | None = None, refuse: Verdict | None = None) -> BridgeDaemon:
    made = [] if made is None else made

    def new_publisher(on_delivery: Any) -> InMemoryTransactionalPublisher:
        made.append(InMemoryTransactionalPublisher(on_delivery, coordinator, max_events=CONFIG.transaction_max_events,
                                                   interval_s=CONFIG.transaction_interval_ms / 1000, refuse=refuse))
        return made[-1]

    return BridgeDaemon(CONFIG.loop, CONFIG.topics, offsets=store, open_reader=outbox.reader,
                        new_publisher=new_publisher, topic_guard=AcceptingTopicGuard(), instance_id="unit",
                        committed=coordinator.committed)


def _run_until(daemon: BridgeDaemon, outbox: InMemoryOutbox, done: Callable[[], bool]) -> int:
    """Run the daemon on this thread until `done` holds when it waits for rows, then stop it."""
    deadline = time.monotonic() + SCENARIO_LIMIT_S

    def on_wait(_waits: int) -> None:
        assert time.monotonic() < deadline, "the scenario did not finish"
        if done():
            daemon.stop()

    outbox.on_wait = on_wait
    return daemon.run()


def _seqs(records: list[KafkaRecord]) -> list[int]:
    return [record.seq for record in records]


def test_every_event_is_committed_once_and_the_watermark_never_passes_what_kafka_committed() -> None:
    outbox, coordinator = InMemoryOutbox(), InMemoryCoordinator()
    store = CheckedStore(coordinator)
    for n in range(20):
        outbox.write(f"a{n % 4}")
    daemon = _daemon(outbox, store, coordinator)
    assert _run_until(daemon, outbox, lambda: store.watermark == 20) == EXIT_OK
    assert _seqs(coordinator.delivered) == list(range(1, 21))
    assert coordinator.progress == 20 and coordinator.commits >= 20 // CONFIG.transaction_max_events
    assert store.written and all(watermark <= committed for watermark, committed in store.written), store.written
    assert store.status["delivery"] == "exactly-once", "`outbox-bridge status` says which delivery the leader runs"


def test_a_restart_resumes_after_what_kafka_committed_not_after_an_older_watermark(
        caplog: pytest.LogCaptureFixture) -> None:
    outbox, coordinator = InMemoryOutbox(), InMemoryCoordinator()
    store = InMemoryLeaseStore()
    for _ in range(10):
        outbox.write()
    first = _daemon(outbox, store, coordinator)
    assert _run_until(first, outbox, lambda: store.watermark == 10) == EXIT_OK
    store.watermark = 4  # as if the process died after Kafka committed 5..10 and before it persisted them
    for _ in range(5):
        outbox.write()
    second = _daemon(outbox, store, coordinator)
    with caplog.at_level(logging.INFO, logger="bridge.daemon"):
        assert _run_until(second, outbox, lambda: store.watermark == 15) == EXIT_OK
    assert _seqs(coordinator.delivered) == list(range(1, 16)), "5..10 are not sent again"
    resumed = [r for r in caplog.records if r.getMessage().startswith("resuming after the last seq Kafka committed")]
    assert [(r.committed_seq, r.watermark) for r in resumed] == [(10, 4)]  # type: ignore[attr-defined]


def test_a_dead_leaders_open_transaction_never_becomes_visible() -> None:
    outbox, coordinator = InMemoryOutbox(), InMemoryCoordinator()
    store = InMemoryLeaseStore()
    for _ in range(6):
        outbox.write()
    dead = InMemoryTransactionalPublisher(lambda *_: None, coordinator, max_events=100, interval_s=3600)
    for seq in (1, 2, 3):
        dead.send(KafkaRecord.of(seq, "u.order", b"a", b"{}", [("seq", str(seq).encode())]), 0)
    dead.poll(0)  # appended, not committed: its process froze here
    daemon = _daemon(outbox, store, coordinator)
    assert _run_until(daemon, outbox, lambda: store.watermark == 6) == EXIT_OK
    dead.commit()  # woken: too late, the new leader's producer fenced it
    assert dead.failure is not None and dead.failure.code == KafkaError._FENCED
    assert _seqs(coordinator.delivered) == [1, 2, 3, 4, 5, 6], "only the new leader's records are committed"


def _fenced_after_three(lease_taken: bool, caplog: pytest.LogCaptureFixture) -> tuple[
        int, InMemoryOutbox, InMemoryLeaseStore, InMemoryCoordinator, list[InMemoryTransactionalPublisher],
        list[InMemoryTransactionalPublisher]]:
    """A leader publishes 1..3; three more are written and another producer of its transactional.id starts (with
    `lease_taken`, another instance took the lease first); run until it exits, or until it published 4..6.
    Returns the exit code, the outbox, lease store and coordinator, its producers and the other one."""
    outbox, coordinator = InMemoryOutbox(), InMemoryCoordinator()
    store = InMemoryLeaseStore()
    for _ in range(3):
        outbox.write()
    made: list[InMemoryTransactionalPublisher] = []
    daemon = _daemon(outbox, store, coordinator, made)
    other: list[InMemoryTransactionalPublisher] = []

    def done() -> bool:
        if not other and store.watermark == 3:
            for _ in range(3):
                outbox.write()
            if lease_taken:
                store.steal()
            other.append(InMemoryTransactionalPublisher(lambda *_: None, coordinator))  # fences the term's producer
            return False
        return bool(other) and store.watermark == 6

    with caplog.at_level(logging.WARNING):
        code = _run_until(daemon, outbox, done)
    return code, outbox, store, coordinator, made, other


def test_a_producer_fenced_when_another_instance_took_the_lease_exits_saying_so_and_a_restart_leads(
        caplog: pytest.LogCaptureFixture) -> None:
    code, outbox, store, coordinator, made, _ = _fenced_after_three(True, caplog)
    assert code == EXIT_FENCED
    fenced = [r for r in caplog.records if r.getMessage().startswith("fenced: another instance leads")]
    assert fenced and "fenced by a new leader's producer" in str(getattr(fenced[0], "error", "")), \
        "the process exits with one line saying it was fenced, and by what"
    assert _seqs(coordinator.delivered) == [1, 2, 3], "nothing after the fence is committed by the fenced producer"
    assert len(made) == 1, "a fenced process makes no new producer"
    store.owner = None  # the other instance stopped and gave the lease up
    restarted = _daemon(outbox, store, coordinator)
    assert _run_until(restarted, outbox, lambda: store.watermark == 6) == EXIT_OK
    assert _seqs(coordinator.delivered) == [1, 2, 3, 4, 5, 6]


def test_a_producer_fenced_by_an_instance_that_no_longer_leads_fences_it_back_and_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    # The other producer is a woken old leader's: its init_transactions, begun before it froze, ends now.
    code, _, _, coordinator, made, stale = _fenced_after_three(False, caplog)
    assert code == EXIT_OK
    assert any(r.getMessage().startswith("fenced by a producer of an instance that no longer leads")
               for r in caplog.records), "the term says what happened"
    assert _seqs(coordinator.delivered) == [1, 2, 3, 4, 5, 6]
    assert len(made) == 2, "one new producer, which fenced the stale one back"
    stale[0].commit()
    assert stale[0].failure is not None and stale[0].failure.code == KafkaError._FENCED


def test_a_failed_transaction_is_sent_again_without_a_duplicate_reaching_read_committed_consumers() -> None:
    outbox, coordinator = InMemoryOutbox(), InMemoryCoordinator()
    store = InMemoryLeaseStore()
    for _ in range(9):
        outbox.write()
    refused: list[int] = []

    def once(record: KafkaRecord) -> KafkaError | None:
        if record.seq == 5 and not refused:
            refused.append(record.seq)
            return KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out")
        return None

    made: list[InMemoryTransactionalPublisher] = []
    daemon = _daemon(outbox, store, coordinator, made, refuse=once)
    assert _run_until(daemon, outbox, lambda: store.watermark == 9) == EXIT_OK
    assert refused == [5] and len(made) >= 2, "the failed producer was discarded"
    assert _seqs(coordinator.delivered) == list(range(1, 10)), "the aborted transaction's records appear once"


class Crash(RuntimeError):
    """Stands for the process dying (kill -9) at the point a test chooses."""


class RewindingStore(InMemoryLeaseStore):
    """A lease store that notes when a rewind request was stored (the lower watermark written)."""

    rewound = False

    def apply_rewind(self, lease: Lease, request: Any, lease_seconds: float) -> bool:
        applied = super().apply_rewind(lease, request, lease_seconds)
        self.rewound = self.rewound or applied
        return applied


def test_a_crash_after_a_rewind_is_stored_and_before_the_next_commit_still_sends_the_rewound_events_again() -> None:
    outbox, coordinator = InMemoryOutbox(), InMemoryCoordinator()
    store = RewindingStore()
    for _ in range(10):
        outbox.write()
    assert _run_until(_daemon(outbox, store, coordinator), outbox, lambda: store.watermark == 10) == EXIT_OK
    store.request_rewind(from_seq=5)  # `outbox-bridge replay --mode rewind --from-seq 5`

    crashed: list[int] = []

    class DiesAfterTheRewind(InMemoryTransactionalPublisher):
        def send(self, record: KafkaRecord, generation: int) -> None:
            if store.rewound and not crashed:  # the lower watermark is stored; nothing re-sent is committed yet
                crashed.append(record.seq)
                raise Crash("killed before the first re-sent transaction commits")
            super().send(record, generation)

    def new_publisher(on_delivery: Any) -> InMemoryTransactionalPublisher:
        return DiesAfterTheRewind(on_delivery, coordinator, max_events=CONFIG.transaction_max_events,
                                  interval_s=CONFIG.transaction_interval_ms / 1000)

    dying = BridgeDaemon(CONFIG.loop, CONFIG.topics, offsets=store, open_reader=outbox.reader,
                         new_publisher=new_publisher, topic_guard=AcceptingTopicGuard(), instance_id="dying",
                         committed=coordinator.committed)
    with pytest.raises(Crash):
        _run_until(dying, outbox, lambda: False)
    assert crashed == [5] and store.watermark == 4
    store.steal()  # its lease is left to expire; the next leader takes it over

    assert _run_until(_daemon(outbox, store, coordinator), outbox, lambda: store.watermark == 10) == EXIT_OK
    assert _seqs(coordinator.delivered) == [*range(1, 11), *range(5, 11)], "the rewound events are sent again"


def _init_failing(config: BridgeConfig, outbox: InMemoryOutbox, store: InMemoryLeaseStore,
                  coordinator: InMemoryCoordinator, failures: int, each_s: float = 0.0
                  ) -> tuple[BridgeDaemon, list[InMemoryTransactionalPublisher]]:
    """A daemon whose first `failures` producers time out in init_transactions, each after `each_s` seconds; and
    the producers it made."""
    made: list[InMemoryTransactionalPublisher] = []

    def new_publisher(on_delivery: Any) -> InMemoryTransactionalPublisher:
        timed_out = None
        if len(made) < failures:
            time.sleep(each_s)
            timed_out = KafkaError(KafkaError._TIMED_OUT, "Local: Timed out")
        made.append(InMemoryTransactionalPublisher(on_delivery, coordinator, max_events=config.transaction_max_events,
                                                   interval_s=config.transaction_interval_ms / 1000,
                                                   init_error=timed_out))
        return made[-1]

    daemon = BridgeDaemon(config.loop, config.topics, offsets=store, open_reader=outbox.reader,
                          new_publisher=new_publisher, topic_guard=AcceptingTopicGuard(), instance_id="unit",
                          committed=coordinator.committed)
    return daemon, made


def test_a_producer_whose_transactions_did_not_start_is_replaced_without_claiming_a_failed_delivery(
        caplog: pytest.LogCaptureFixture) -> None:
    outbox, coordinator = InMemoryOutbox(), InMemoryCoordinator()
    store = InMemoryLeaseStore()
    for _ in range(4):
        outbox.write()
    # The first times out in init_transactions, as while the broker still aborts a dead leader's transaction.
    daemon, _ = _init_failing(CONFIG, outbox, store, coordinator, failures=1)
    with caplog.at_level(logging.WARNING, logger="bridge.daemon"):
        assert _run_until(daemon, outbox, lambda: store.watermark == 4) == EXIT_OK
    messages = [r.getMessage() for r in caplog.records]
    assert "the producer failed before it carried a record; making a new one" in messages
    assert not [m for m in messages if m.startswith("delivery failed")], messages
    assert _seqs(coordinator.delivered) == [1, 2, 3, 4]


def test_a_run_of_slow_failed_init_transactions_never_lets_the_lease_lapse() -> None:
    # As on a cluster whose transaction coordinator is still loading: each new producer's init_transactions
    # blocks for most of half the lease and times out, several times in a row.
    config = CONFIG.model_copy(update={"lease_timeout_s": 1.0})
    outbox, coordinator = InMemoryOutbox(), InMemoryCoordinator()
    renewed: list[float] = []

    class TimedStore(InMemoryLeaseStore):
        def try_acquire(self, owner: str, lease_seconds: float) -> Lease | None:
            renewed.append(time.monotonic())
            return super().try_acquire(owner, lease_seconds)

        def persist(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any],
                    **kw: Any) -> None:
            renewed.append(time.monotonic())
            super().persist(lease, watermark, lease_seconds, status, **kw)

    store = TimedStore()
    for _ in range(4):
        outbox.write()
    daemon, made = _init_failing(config, outbox, store, coordinator, failures=4, each_s=config.lease_timeout_s * 0.4)
    assert _run_until(daemon, outbox, lambda: store.watermark == 4) == EXIT_OK
    assert len(made) == 5
    gaps = [later - earlier for earlier, later in itertools.pairwise(renewed)]
    assert max(gaps) < config.lease_timeout_s, f"the lease went {max(gaps):.2f}s without a renewal"
    assert _seqs(coordinator.delivered) == [1, 2, 3, 4]
