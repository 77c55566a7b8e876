"""The daemon's logic on its own: given an in-memory outbox, lease store and publisher, run on the test's
thread with no database and no broker. Each scenario step happens when the daemon waits for rows."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from bridge.config import BridgeConfig
from bridge.core.records import KafkaRecord
from bridge.daemon import EXIT_OK, BridgeDaemon
from bridge.errors import FencedError
from bridge.kafka.testing import AcceptingTopicGuard, publisher_factory
from bridge.store.dead_letters import DeadLetter
from bridge.store.lease import Lease
from bridge.store.testing import InMemoryLeaseStore, InMemoryOutbox

CONFIG = BridgeConfig(allow_single_broker=True, replication_factor=1, persist_interval_s=0.01,
                      poll_interval_min_ms=1, poll_interval_max_ms=1)
#: A scenario that has not finished by then is a failure, not a hang.
SCENARIO_LIMIT_S = 20.0


def _daemon(outbox: InMemoryOutbox, store: InMemoryLeaseStore, delivered: list[KafkaRecord],
            config: BridgeConfig = CONFIG) -> BridgeDaemon:
    make = publisher_factory(delivered)
    return BridgeDaemon(
        config.loop,
        config.topics,
        offsets=store,
        open_reader=outbox.reader,
        new_publisher=lambda on_delivery: make({}, on_delivery),
        topic_guard=AcceptingTopicGuard(),
        instance_id="unit",
    )


def _script(daemon: BridgeDaemon, outbox: InMemoryOutbox, store: InMemoryLeaseStore,
            steps: list[Callable[[], None]]) -> None:
    """Run each step when the daemon is idle and has checkpointed (persisted, renewed, looked for
    rewind requests) since the step before; stop the daemon once the steps are done."""
    deadline = time.monotonic() + SCENARIO_LIMIT_S
    persisted_at = [-1]

    def on_wait(_waits: int) -> None:
        assert time.monotonic() < deadline, "the scenario did not finish"
        if store.persists <= persisted_at[0]:
            return
        persisted_at[0] = store.persists
        if steps:
            steps.pop(0)()
        else:
            daemon.stop()

    outbox.on_wait = on_wait


def _seqs(delivered: list[KafkaRecord]) -> list[int]:
    return [record.seq for record in delivered]


def test_out_of_order_commits_are_published_in_seq_order_once_every_earlier_writer_finished() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(), []
    first, second, third = outbox.begin("k"), outbox.begin("k"), outbox.begin("k")
    daemon = _daemon(outbox, store, delivered)
    seen: list[list[int]] = []
    _script(daemon, outbox, store, [
        lambda: outbox.commit(third),
        lambda: seen.append(_seqs(delivered)),
        lambda: outbox.commit(first),
        lambda: seen.append(_seqs(delivered)),
        lambda: outbox.commit(second),
    ])
    assert daemon.run() == EXIT_OK
    assert seen == [[], [first]], "seq 3 waits for the writers of 1 and 2; seq 1 goes as soon as it commits"
    assert _seqs(delivered) == [first, second, third]
    assert store.watermark == third and daemon.holes_settled == 0
    assert store.owner is None, "a graceful stop gives the lease up"


def test_a_rolled_back_seq_is_settled_as_a_hole_and_the_rest_published() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(), []
    lost, kept = outbox.begin(), outbox.begin()
    daemon = _daemon(outbox, store, delivered)
    _script(daemon, outbox, store, [lambda: outbox.commit(kept), lambda: outbox.rollback(lost)])
    assert daemon.run() == EXIT_OK
    assert _seqs(delivered) == [kept]
    assert daemon.holes_settled == 1 and store.watermark == kept


def test_after_the_lease_is_taken_over_nothing_more_is_sent_and_the_watermark_stays() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(), []
    for _ in range(5):
        outbox.write()
    daemon = _daemon(outbox, store, delivered)
    at_takeover: list[int] = []

    def take_over() -> None:
        at_takeover.append(len(delivered))
        store.steal()
        for _ in range(5):
            outbox.write()
        daemon.stop()

    _script(daemon, outbox, store, [lambda: None, take_over])  # the first persist may precede the acks
    assert daemon.run() == EXIT_OK
    assert at_takeover == [5]
    assert _seqs(delivered) == [1, 2, 3, 4, 5], "nothing read after the takeover went out"
    assert store.watermark == 5 and store.owner == "another-instance", "the fenced persist changed nothing"


def test_an_operator_rewind_is_applied_under_the_lease_and_re_sends_from_its_seq() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(), []
    for aggregate in "abcab":
        outbox.write(aggregate)
    daemon = _daemon(outbox, store, delivered)
    requests = []
    _script(daemon, outbox, store, [lambda: requests.append(store.request_rewind(3)), lambda: None, lambda: None])
    assert daemon.run() == EXIT_OK
    assert _seqs(delivered) == [1, 2, 3, 4, 5, 3, 4, 5]
    assert store.rewind_status(requests[0]) == "applied" and daemon.rewinds_applied == 1
    assert store.watermark == 5


def test_a_rewind_above_the_watermark_is_refused_and_nothing_is_skipped() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(), []
    outbox.write()
    waiting = outbox.begin()
    daemon = _daemon(outbox, store, delivered)
    requests = []
    _script(daemon, outbox, store, [lambda: requests.append(store.request_rewind(5)), lambda: None,
                             lambda: outbox.commit(waiting)])
    assert daemon.run() == EXIT_OK
    assert store.rewind_status(requests[0]) == "refused"
    assert _seqs(delivered) == [1, waiting] and store.watermark == waiting


class _StopsWhenFenced(InMemoryLeaseStore):
    """A lease store that runs `on_fenced` when a write finds the lease taken over, then refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.on_fenced: Callable[[], None] = lambda: None

    def persist(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], *,
                dead_letters: Sequence[DeadLetter] = ()) -> None:
        try:
            super().persist(lease, watermark, lease_seconds, status, dead_letters=dead_letters)
        except FencedError:
            self.on_fenced()
            raise


def test_a_lease_lost_right_after_a_late_row_rewind_closes_the_producer_the_rewind_made() -> None:
    outbox, store, delivered, made = InMemoryOutbox(), _StopsWhenFenced(), [], []
    lost, kept = outbox.begin(), outbox.begin()
    outbox.commit(kept)
    outbox.rollback(lost)  # settled as a hole by the first read
    make = publisher_factory(delivered, made)
    daemon = BridgeDaemon(CONFIG.loop, CONFIG.topics, offsets=store, open_reader=outbox.reader,
                          new_publisher=lambda on_delivery: make({}, on_delivery),
                          topic_guard=AcceptingTopicGuard(), instance_id="unit")
    store.on_fenced = daemon.stop

    def late_row_then_takeover() -> None:
        outbox.write_at(lost)  # the next checkpoint finds it and rewinds, making a new producer ...
        store.steal()  # ... and then its persist finds the lease gone

    _script(daemon, outbox, store, [late_row_then_takeover])
    assert daemon.run() == EXIT_OK
    assert daemon.holes_settled == 1 and daemon.metrics.late_events._value.get() == 1
    assert len(made) == 2, "the rewind made a second producer"
    assert all(publisher.closed for publisher in made), "no producer outlives the lost lease"
    assert _seqs(delivered) == [kept], "nothing went out after the takeover"
