"""What the daemon keeps on record and what it refuses, on its own (in-memory outbox, lease store, publisher):
a dead letter goes on record with the persist whose watermark passes it, never before; a name whose rows
above its watermark were deleted, or that was retired, refuses to lead (exit 10) unless told where to
start, and then counts gaps among the deleted seqs as deleted, not as rolled-back transactions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from bridge.config import BridgeConfig
from bridge.daemon import EXIT_OK
from bridge.daemon.history import EXIT_ROWS_GONE
from bridge.store.dead_letters import DeadLetter
from bridge.store.deletable import Deleted
from bridge.store.lease import Lease
from bridge.store.testing import InMemoryLeaseStore, InMemoryOutbox
from tests.unit.bridge.daemon.test_in_memory import CONFIG, _daemon, _script, _seqs

pytestmark = pytest.mark.unit

DEAD_LETTER = BridgeConfig(allow_single_broker=True, replication_factor=1, persist_interval_s=0.01,
                           poll_interval_min_ms=1, poll_interval_max_ms=1, poison_policy="dead-letter")


class _Recording(InMemoryLeaseStore):
    """Remembers, for each persist, the watermark written and the dead letters recorded with it."""

    def __init__(self, watermark: int = 0) -> None:
        super().__init__(watermark=watermark)
        self.written: list[tuple[int, list[int]]] = []

    def persist(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], *,
                dead_letters: Sequence[DeadLetter] = ()) -> None:
        super().persist(lease, watermark, lease_seconds, status, dead_letters=dead_letters)
        self.written.append((watermark, [letter.seq for letter in dead_letters]))


def _deleted(through: int) -> Deleted:
    now = datetime.now(UTC)
    return Deleted(first_seq=1, through_seq=through, runs=1, first_at=now, last_at=now, by=("retention of 'a'",))


def test_a_dead_letter_is_recorded_once_with_the_persist_that_passes_it() -> None:
    outbox, store, delivered = InMemoryOutbox(), _Recording(), []
    for n in range(6):
        outbox.write(aggregate_id="" if n == 3 else f"a-{n}")  # seq 4 has no key: poison
    daemon = _daemon(outbox, store, delivered, DEAD_LETTER)
    _script(daemon, outbox, store, [lambda: None])
    assert daemon.run() == EXIT_OK
    recorded = [(watermark, seqs) for watermark, seqs in store.written if seqs]
    assert len(recorded) == 1 and recorded[0][1] == [4] and recorded[0][0] >= 4
    letter, _ = store.dead_letters[4]
    assert "aggregate_id is empty" in letter.reason and letter.dead_letter_topic == DEAD_LETTER.dlq_topic_name
    assert not letter.payload_truncated
    assert daemon.metrics.registry.get_sample_value("outbox_dead_letters_open") == 1


def test_a_name_whose_rows_were_deleted_refuses_to_lead_and_sends_nothing() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(), []
    for _ in range(3):
        outbox.write()
    store.deleted = _deleted(through=2)
    daemon = _daemon(outbox, store, delivered)
    assert daemon.run() == EXIT_ROWS_GONE
    assert delivered == [] and store.watermark == 0 and store.owner is None, "nothing sent, the lease given up"
    assert "seqs 1 to 2" in store.status["last_error"] and "--start-from" in store.status["last_error"]


def test_a_retired_name_refuses_and_started_from_a_seq_leads_again_counting_deleted_gaps_as_deleted() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(), []
    rolled_back = []
    for n in range(1, 11):
        seq = outbox.begin()
        if n in (5, 6, 7):  # gaps the deletion record covers: deleted, not rolled back
            rolled_back.append(seq)
            outbox.rollback(seq)
        else:
            outbox.commit(seq)
    store.retired_at = datetime.now(UTC)
    store.deleted = _deleted(through=8)
    assert _daemon(outbox, store, delivered).run() == EXIT_ROWS_GONE

    config = CONFIG.model_copy(update={"start_from": "3"})
    daemon = _daemon(outbox, store, delivered, config)
    _script(daemon, outbox, store, [lambda: None])
    assert daemon.run() == EXIT_OK
    assert _seqs(delivered) == [3, 4, 8, 9, 10]
    assert daemon.deleted_passed == 3 and daemon.holes_settled == 0
    [start] = store.starts
    assert start.watermark == 2 and start.accepted_through == 8 and "retired" in start.reason
    assert store.retired_at is None and store.watermark == 10


def test_start_from_is_ignored_when_the_name_leads_from_its_watermark() -> None:
    outbox, store, delivered = InMemoryOutbox(), InMemoryLeaseStore(watermark=2), []
    store.led_before = True
    for _ in range(4):
        outbox.write()
    daemon = _daemon(outbox, store, delivered, CONFIG.model_copy(update={"start_from": "earliest"}))
    _script(daemon, outbox, store, [lambda: None])
    assert daemon.run() == EXIT_OK
    assert _seqs(delivered) == [3, 4] and store.starts == []
