"""The events every benchmark writes: deterministic, 512-byte JSON payloads, loaded fast.

Payloads carry a random hex pad (from a fixed pool) so compression sees realistic, not trivially
repetitive, bytes: lz4 shrinks them about twofold. Backlogs are loaded outside the timed part, with
COPY on PostgreSQL and one big executemany transaction on SQLite.
"""

from __future__ import annotations

import functools
import random
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

PAYLOAD_BYTES = 512
AGGREGATE_TYPE = "order"
EVENT_TYPE = "OrderPlaced"
_PAD_POOL = 4096


@dataclass(frozen=True)
class Workload:
    """What the events look like: how many aggregates (Kafka keys) and how large each payload is."""

    prefix: str = "e"
    keys: int = 10_000
    payload_bytes: int = PAYLOAD_BYTES
    #: Every row written in a sampled trace: a W3C `traceparent` in its headers (each event its own trace), as
    #: `bridge.writer` records it inside an active span.
    traced: bool = False

    @property
    def columns(self) -> str:
        """The columns `rows` gives, as the loaders name them."""
        return f"{_COLUMNS}, headers" if self.traced else _COLUMNS

    def headers(self, i: int) -> str:
        return f'{{"traceparent":"00-{i + 1:032x}-{i + 1:016x}-01"}}'

    def event_id(self, i: int) -> str:
        return f"{self.prefix}-{i:010d}"

    def aggregate_id(self, i: int) -> str:
        return f"order-{i % self.keys:07d}"

    def payload(self, i: int) -> str:
        head = f'{{"order_id":"{self.aggregate_id(i)}","n":{i},"amount_cents":{(i * 7919) % 100000},"pad":"'
        pad = _pads(self.payload_bytes)[i % _PAD_POOL]
        return head + pad[: self.payload_bytes - len(head) - 2] + '"}'

    def row(self, i: int) -> tuple[str, str, str, str, str]:
        return (self.event_id(i), AGGREGATE_TYPE, self.aggregate_id(i), EVENT_TYPE, self.payload(i))

    def rows(self, start: int, count: int) -> Iterator[tuple[str, ...]]:
        for i in range(start, start + count):
            yield (*self.row(i), self.headers(i)) if self.traced else self.row(i)

    def kafka_record(self, i: int, seq: int, occurred_at: str) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        """The (key, value, headers) the bridge would publish for event i, as the ceiling sends it."""
        return (
            self.aggregate_id(i).encode(),
            self.payload(i).encode(),
            [
                ("event_id", self.event_id(i).encode()),
                ("event_type", EVENT_TYPE.encode()),
                ("aggregate_type", AGGREGATE_TYPE.encode()),
                ("seq", str(seq).encode()),
                ("occurred_at", occurred_at.encode()),
            ],
        )


@functools.cache
def _pads(length: int) -> list[str]:
    rng = random.Random(7)
    return [rng.randbytes(length // 2).hex() for _ in range(_PAD_POOL)]


_COLUMNS = "event_id, aggregate_type, aggregate_id, event_type, payload"


def load_postgres(dsn: str, workload: Workload, count: int, start: int = 0, chunk: int = 100_000) -> float:
    """COPY `count` events into domain_events (one transaction per chunk), then VACUUM ANALYZE; return seconds.

    VACUUM sets the hint bits and visibility map a long-lived table would have, so the bridge's first
    read of each page is not also the one that writes hint bits back.
    """
    started = time.monotonic()
    with psycopg.connect(dsn) as conn:
        for offset in range(start, start + count, chunk):
            n = min(chunk, start + count - offset)
            with conn.cursor() as cur, cur.copy(f"COPY domain_events ({workload.columns}) FROM STDIN") as copy:
                buffer: list[str] = []
                for row in workload.rows(offset, n):
                    buffer.append("\t".join(row))
                    if len(buffer) >= 5000:
                        copy.write("\n".join(buffer) + "\n")
                        buffer.clear()
                if buffer:
                    copy.write("\n".join(buffer) + "\n")
            conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) domain_events")
    return time.monotonic() - started


def load_sqlite(path: str, workload: Workload, count: int, start: int = 0) -> float:
    """Insert `count` events in one transaction (WAL mode, as the bridge opens it); return seconds."""
    started = time.monotonic()
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        with conn:
            marks = ", ".join("?" * len(workload.columns.split(",")))
            conn.executemany(f"INSERT INTO domain_events ({workload.columns}) VALUES ({marks})",
                             workload.rows(start, count))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.monotonic() - started


def now_iso() -> str:
    return datetime.now(UTC).isoformat()
