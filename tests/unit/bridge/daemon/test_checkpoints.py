"""The checkpoint's statements run beside the loop, not in its way (`bridge.daemon.checkpoints`).

A checkpoint is six or seven statements (rows in settled holes, the status reads, the fenced persist, the open
dead letters, a rewind request): about 7 ms on a local PostgreSQL, once a second, during which a loop that ran
them read and sent nothing. Here: the whole daemon on SQLite sends a commit while its persist is held; and the
rules of `Checkpoints` one by one: what the loop must do itself, a lease that runs out while a checkpoint is in
flight, a fenced write and a database error met on the worker.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.config import load_config
from bridge.core.records import KafkaRecord
from bridge.daemon.checkpoints import Checkpoints
from bridge.errors import FencedError, TransientStoreError
from bridge.migrate import upgrade
from bridge.store.offsets import OffsetStore
from tests.support import insert_events, running, start_unit_bridge, wait_until


def test_the_loop_sends_a_commit_while_the_checkpoint_waits_on_the_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    held = threading.Event()
    release = threading.Event()
    persist = OffsetStore.persist

    def slow_persist(self: OffsetStore, *args: Any, **kwargs: Any) -> None:
        if not release.is_set():
            held.set()
            release.wait(20)
        persist(self, *args, **kwargs)

    delivered: list[KafkaRecord] = []
    upgrade(url)
    insert_events(url, 5)
    with running(start_unit_bridge(url, "beside", delivered, persist_interval_s=0.2)) as bridge:
        wait_until(lambda: len(delivered) == 5, 20, "the first 5 events sent")
        monkeypatch.setattr(OffsetStore, "persist", slow_persist)
        try:
            assert held.wait(10), "no checkpoint persisted"
            insert_events(url, 3, start=5)
            # Sent while the persist is still held: the loop did not wait for it.
            deadline = time.monotonic() + 5
            while len(delivered) < 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            sent_meanwhile = len(delivered)
        finally:
            release.set()
        assert sent_meanwhile == 8, f"{sent_meanwhile - 5} of 3 commits sent while the checkpoint's persist was held"
        bridge.stop()
    seqs = [record.seq for record in delivered]
    assert seqs == sorted(seqs) and len(set(seqs)) == 8


class _Fake:
    """The term's side of `Checkpoints`: a clock for the lease, what the worker answers, what the loop ran."""

    def __init__(self) -> None:
        self.expired = False
        self.in_loop: list[str] = []
        self.errors: list[Exception] = []
        self.answer: bool | BaseException = False
        self.gate = threading.Event()
        self.gate.set()
        self.looked = threading.Event()

    def look(self) -> Any:
        def work() -> bool:
            self.looked.set()
            self.gate.wait(10)
            if isinstance(self.answer, BaseException):
                raise self.answer
            return self.answer
        return work

    def checkpoints(self, *, worker: bool = True) -> Checkpoints:
        settings = load_config(flags={"db_url": "sqlite://", "persist_interval_s": 1.0}, env={}).loop
        return Checkpoints(settings, 0.0, lambda: self.expired, lambda: self.in_loop.append("checkpoint"),
                           lambda kind, exc: self.errors.append(exc), look=self.look, worker=worker)

    def answered(self, answer: bool | BaseException) -> Checkpoints:
        """Checkpoints whose first one, due at 1.0, the worker has answered with `answer` (not yet collected)."""
        self.answer = answer
        checkpoints = self.checkpoints()
        checkpoints.turn(1.0)
        checkpoints.finish()
        return checkpoints


def test_a_due_checkpoint_runs_on_the_worker_and_the_loop_goes_on_until_it_answers() -> None:
    fake = _Fake()
    fake.gate.clear()
    checkpoints = fake.checkpoints()
    checkpoints.turn(0.5)
    assert not fake.looked.wait(0.2), "not due yet"
    started = time.monotonic()
    checkpoints.turn(1.0)
    assert fake.looked.wait(5)
    checkpoints.turn(1.1)  # in flight: the loop goes on
    assert time.monotonic() - started < 1 and fake.in_loop == []
    fake.answer = True  # a rewind wanted: the loop checkpoints itself once it has the answer
    fake.gate.set()
    checkpoints.finish()
    checkpoints.turn(1.2)
    assert fake.in_loop == ["checkpoint"]
    checkpoints.close()


def test_a_lease_that_runs_out_meanwhile_waits_for_the_checkpoint_in_flight_then_checkpoints_in_the_loop() -> None:
    fake = _Fake()
    fake.gate.clear()
    checkpoints = fake.checkpoints()
    checkpoints.turn(1.0)
    assert fake.looked.wait(5)
    fake.expired = True
    threading.Timer(0.3, fake.gate.set).start()
    started = time.monotonic()
    checkpoints.turn(1.1)
    assert time.monotonic() - started >= 0.25, "the loop went on past a lease that ran out"
    assert fake.in_loop == ["checkpoint"]  # and renewed it in the loop before reading again
    checkpoints.close()


def test_a_fenced_write_on_the_worker_stops_the_loop() -> None:
    checkpoints = _Fake().answered(FencedError("another instance leads"))
    with pytest.raises(FencedError, match="another instance leads"):
        checkpoints.turn(1.1)
    checkpoints.close()


def test_a_database_error_on_the_worker_is_counted_and_stops_the_loop_once_the_lease_ran_out() -> None:
    fake = _Fake()
    checkpoints = fake.answered(TransientStoreError("connection refused"))
    checkpoints.turn(1.1)
    assert [str(e) for e in fake.errors] == ["connection refused"] and fake.in_loop == []
    checkpoints.turn(2.0)
    checkpoints.finish()
    fake.expired = True
    with pytest.raises(FencedError, match="could not renew the lease"):
        checkpoints.turn(2.1)
    checkpoints.close()


def test_without_a_worker_a_due_checkpoint_runs_in_the_loop() -> None:
    fake = _Fake()
    checkpoints = fake.checkpoints(worker=False)
    checkpoints.turn(0.5)
    checkpoints.turn(1.0)
    assert fake.in_loop == ["checkpoint"] and not fake.looked.is_set()
    checkpoints.close()
