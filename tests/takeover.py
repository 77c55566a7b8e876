"""Watching a takeover from outside: the bridge's row in bridge_offsets sampled on a thread, and what each client
got to the broker through `tests.kafkaproxy`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore
from tests.kafkaproxy import KafkaFaultProxy


@dataclass(frozen=True, slots=True)
class Sample:
    """The bridge's row in bridge_offsets, as read at wall-clock time `at` (after the read returned)."""

    at: float
    watermark: int
    epoch: int
    owner_pid: int | None
    status: dict[str, Any]


class OffsetsWatch:
    """Reads the bridge's row every 50 ms on its own thread, for the whole scenario."""

    def __init__(self, url: str, bridge_name: str) -> None:
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._engine = make_engine(url)
        self._store = OffsetStore(self._engine, bridge_name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offsets-watch", daemon=True)

    def __enter__(self) -> OffsetsWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._engine.dispose()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                row = self._store.read()
            except Exception as exc:  # noqa: BLE001 - recorded; the test fails on it
                self.errors.append(repr(exc))
            else:
                if row is not None:
                    pid = int(row.owner.split(":")[1]) if row.owner and row.lease_expires_at else None
                    self.samples.append(Sample(time.time(), row.watermark, row.epoch, pid, dict(row.status)))
            self._stop.wait(0.05)

    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def watermark(self) -> int:
        latest = self.latest()
        return latest.watermark if latest is not None else 0

    def last_of(self, pid: int) -> Sample:
        return [s for s in self.samples if s.owner_pid == pid][-1]


def produced_by(proxy: KafkaFaultProxy, client_id: str, after: float = 0.0,
                before: float = float("inf")) -> tuple[int, int]:
    """Produce requests, and their records, that `client_id` got to the broker between two monotonic times."""
    with proxy.lock:
        sent = [p for p in proxy.produced if p.client_id == client_id and after <= p.at < before]
    assert all(p.records is not None for p in sent), "every Produce request of the bridge parses"
    return len(sent), sum(p.records or 0 for p in sent)
