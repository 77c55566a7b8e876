"""Application writers that interleave: several connections insert events for the same few aggregates
without locking them, some transactions stay open a while before they commit, and a share roll back.

A row's seq is drawn when it is INSERTed and it becomes visible when its transaction commits, so with
these writers commit order differs from seq order, for one aggregate too: a relay that publishes in
commit order can put a later seq of an aggregate before an earlier one. Each writer is a thread with
its own connection; the harness records which event indexes committed and which rolled back.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.workload import _COLUMNS, Workload

_INSERT = f"INSERT INTO domain_events ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s)"


@dataclass(frozen=True)
class Interleaving:
    """How the writers' transactions overlap."""

    writers: int = 4
    most_events_per_tx: int = 4
    hold_share: float = 0.1  # transactions held open `hold_s` after their last INSERT, before the end
    hold_s: float = 0.5
    rollback_share: float = 0.0


@dataclass
class Outcome:
    committed: set[int] = field(default_factory=set)
    rolled_back: set[int] = field(default_factory=set)
    transactions: int = 0
    held: int = 0
    seconds: float = 0.0
    error: Exception | None = None

    def summary(self) -> dict[str, Any]:
        return {"committed_events": len(self.committed), "rolled_back_events": len(self.rolled_back),
                "transactions": self.transactions, "held_open": self.held, "write_s": round(self.seconds, 2)}


@dataclass
class _Writer:
    """One writer thread's connection loop; an exception is kept for the harness to raise."""

    dsn: str
    workload: Workload
    shape: Interleaving
    until: float
    indexes: itertools.count[int]
    lock: threading.Lock
    rng: random.Random
    outcome: Outcome

    def run(self) -> None:
        try:
            self._transactions()
        except Exception as exc:  # noqa: BLE001 - handed to the harness's thread, which raises it
            self.outcome.error = exc

    def _transactions(self) -> None:
        rng, shape, outcome = self.rng, self.shape, self.outcome
        with psycopg.connect(self.dsn) as conn:
            while time.monotonic() < self.until:
                with self.lock:
                    mine = [next(self.indexes) for _ in range(rng.randint(1, shape.most_events_per_tx))]
                for n in mine:
                    conn.execute(_INSERT, self.workload.row(n), prepare=True)
                    time.sleep(rng.uniform(0, 0.002))  # let the other writers' INSERTs in between
                if rng.random() < shape.hold_share:
                    outcome.held += 1
                    time.sleep(shape.hold_s)
                if rng.random() < shape.rollback_share:
                    conn.rollback()
                    outcome.rolled_back.update(mine)
                else:
                    conn.commit()
                    outcome.committed.update(mine)
                outcome.transactions += 1


def write_interleaved(dsn: str, workload: Workload, shape: Interleaving, seconds: float, seed: int = 8) -> Outcome:
    """Run the writers for `seconds`; return what committed and what rolled back."""
    indexes, lock = itertools.count(), threading.Lock()
    outcomes = [Outcome() for _ in range(shape.writers)]
    started = time.monotonic()
    writers = [_Writer(dsn, workload, shape, started + seconds, indexes, lock, random.Random(seed * 100 + w),
                       outcomes[w]) for w in range(shape.writers)]
    threads = [threading.Thread(target=writer.run, name=f"tx-writer-{n}") for n, writer in enumerate(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    total = Outcome(seconds=time.monotonic() - started)
    for part in outcomes:
        if part.error is not None:
            raise RuntimeError(f"an interleaving writer failed: {part.error}") from part.error
        total.committed |= part.committed
        total.rolled_back |= part.rolled_back
        total.transactions += part.transactions
        total.held += part.held
    return total
