"""Steady application writers: `python -m bench.writer` commits events into a PostgreSQL outbox at a fixed rate.

Several connections (threads) write on an open-loop schedule, as independent application requests
would: transaction i of a writer is due at start + i / rate, whatever happened to the one before, so a
slow commit shows up as latency, not as a lower offered rate (unless the writer falls behind for good,
which the summary reports). Each transaction is one multi-row INSERT of `per_tx` events in autocommit
mode (one round trip: the statement returns once its commit is done); right after it returns the
writer records time.time() for the transaction's events. The record file has one line per
transaction: first event index, count, commit time. A JSON summary goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.bridge_process import ROOT, child_environ
from bench.workload import Workload

_COLUMNS = "event_id, aggregate_type, aggregate_id, event_type, payload"


@dataclass(frozen=True)
class Schedule:
    rate: int  # events per second, all writers together
    seconds: float
    writers: int
    per_tx: int

    @classmethod
    def for_rate(cls, rate: int, seconds: float, max_tx_per_s: int = 1000, writers: int = 8) -> Schedule:
        """At most `max_tx_per_s` commits per second: above that, transactions carry several events."""
        per_tx = max(1, math.ceil(rate / max_tx_per_s))
        return cls(rate, seconds, writers, per_tx)


def _write(dsn: str, workload: Workload, schedule: Schedule, writer: int, start: float,
           log: list[tuple[int, int, float]], lateness: list[float], stop: threading.Event) -> None:
    per_tx, writers = schedule.per_tx, schedule.writers
    tx_interval = per_tx * writers / schedule.rate
    sql = f"INSERT INTO domain_events ({_COLUMNS}) VALUES " + ",".join(["(%s, %s, %s, %s, %s)"] * per_tx)
    transactions = int(schedule.seconds / tx_interval)
    worst = 0.0
    # Autocommit: each INSERT is its own transaction, committed when the statement returns (one round trip).
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(transactions):
            if stop.is_set():
                break
            due = start + writer * tx_interval / writers + i * tx_interval
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            else:
                worst = max(worst, -delay)
            first = (i * writers + writer) * per_tx
            params = [value for n in range(first, first + per_tx) for value in workload.row(n)]
            conn.execute(sql, params, prepare=True)
            log.append((first, per_tx, time.time()))
    lateness.append(worst)


def write(dsn: str, workload: Workload, schedule: Schedule, out: Path, stop: threading.Event | None = None
          ) -> dict[str, Any]:
    """Run the writers to the end of the schedule (or until `stop`); write the record file; summarize."""
    stop = stop or threading.Event()
    logs: list[list[tuple[int, int, float]]] = [[] for _ in range(schedule.writers)]
    lateness: list[float] = []
    start = time.time() + 0.2
    threads = [threading.Thread(target=_write, args=(dsn, workload, schedule, w, start, logs[w], lateness, stop))
               for w in range(schedule.writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended = time.time()
    rows = sorted(entry for log in logs for entry in log)
    with open(out, "w") as file:
        file.writelines(f"{first} {count} {committed:.6f}\n" for first, count, committed in rows)
    written = sum(count for _, count, _ in rows)
    return {
        "offered_rate": schedule.rate,
        "writers": schedule.writers,
        "events_per_tx": schedule.per_tx,
        "events": written,
        "transactions": len(rows),
        "seconds": round(ended - start, 2),
        "achieved_rate": round(written / max(1e-9, ended - start), 1),
        "worst_lateness_s": round(max(lateness, default=0.0), 3),
    }


def read_commits(path: Path) -> dict[int, float]:
    """Event index -> commit time, from a record file."""
    commits: dict[int, float] = {}
    with open(path) as file:
        for line in file:
            first, count, committed = line.split()
            stamp = float(committed)
            for n in range(int(first), int(first) + int(count)):
                commits[n] = stamp
    return commits


class WriterProcess:
    """The writers in their own process, so their interpreter does not compete with the harness's."""

    def __init__(self, dsn: str, prefix: str, keys: int, schedule: Schedule, out: Path) -> None:
        self.out = out
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.writer", "--dsn", dsn, "--prefix", prefix, "--keys", str(keys),
             "--rate", str(schedule.rate), "--seconds", str(schedule.seconds), "--writers", str(schedule.writers),
             "--per-tx", str(schedule.per_tx), "--out", str(out)],
            env=child_environ({}), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self, timeout: float) -> dict[str, Any]:
        stdout, stderr = self.process.communicate(timeout=timeout)
        if self.process.returncode != 0:
            raise RuntimeError(f"the writer failed:\n{stderr[-3000:]}")
        return json.loads(stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)  #: finish the current transactions and write the record file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rate", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--per-tx", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    stop = threading.Event()
    schedule = Schedule(args.rate, args.seconds, args.writers, args.per_tx)
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    summary = write(args.dsn, Workload(prefix=args.prefix, keys=args.keys), schedule, args.out, stop)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
