"""B3 tuning sweep: what a committed row waits for on its way to Kafka, one setting at a time.

A committed row waits for the next read: a read that caught up holds the next one back for
`BRIDGE_POLL_INTERVAL_MIN_MS` (2 ms; 5 ms before), so that a trickle of commits is read a few at a time. What
that read sent goes out at once (the daemon flushes the tail rather than waiting out `BRIDGE_LINGER_MS`, which
only a backlog fills), so the linger should no longer count; its row checks that. Every
`BRIDGE_PERSIST_INTERVAL_S` the loop stops to persist the watermark and renew the lease (a few database round
trips): its row shows what those pauses do to the tail. Each variant is a B3 run
(`bench.b3_latency.latency_run`: writers on an open-loop schedule, latency from commit to the record's
LogAppendTime); the variants run round-robin, ROUNDS times, at each rate, so slow spells of the shared machine
spread over all of them. What a variant costs in throughput is B1-tuning's to say (its linger rows); a
read interval does not act on a backlog, where every read is full. What it costs at these rates is CPU: the
cores the bridge process and its PostgreSQL sessions used while the writers ran, measured beside each run.
"""

from __future__ import annotations

import logging
from typing import Any

from bench.b3_latency import latency_run
from bench.context import Context

log = logging.getLogger("bench.b3_tuning")

ROUNDS = 2
RATES = (1_000, 5_000)

VARIANTS: dict[str, dict[str, str | int]] = {
    "defaults": {},
    "read interval 5 ms (the first default)": {"BRIDGE_POLL_INTERVAL_MIN_MS": 5},
    "read interval 1 ms": {"BRIDGE_POLL_INTERVAL_MIN_MS": 1},
    "linger 0 ms": {"BRIDGE_LINGER_MS": 0},
    "watermark persisted every 4 s": {"BRIDGE_PERSIST_INTERVAL_S": 4},
}

PERCENTILES = ("p50", "p95", "p99", "max")


def run(ctx: Context) -> dict[str, Any]:
    seconds = ctx.sizes.b3_seconds
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {rate: {name: [] for name in VARIANTS} for rate in RATES}
    for round_number in range(1, ROUNDS + 1):
        for rate in RATES:
            for index, (name, settings) in enumerate(VARIANTS.items()):
                result = latency_run(ctx, f"b3t{round_number}-{rate}-{index}", rate, seconds, settings, cpu=True)
                if result["lost"]:
                    raise RuntimeError(f"B3-tuning {name} at {rate}/s lost {result['lost']} events")
                runs[rate][name].append(result)
                log.info("B3 tuning round %d, %d/s, %-32s %s, cores %s", round_number, rate, name,
                         result["latency_ms"], result["cpu_cores"])
    return {"seconds_per_run": seconds, "rounds": ROUNDS,
            "rates": {str(rate): {name: _row(name, results) for name, results in variants.items()}
                      for rate, variants in runs.items()}}


def _row(name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """A variant's means over its rounds: the latency percentiles, the range of p99, the cores."""
    latencies = [r["latency_ms"] for r in results]
    cores = [r["cpu_cores"] for r in results]
    return {
        "settings": VARIANTS[name],
        **{q: round(sum(lat[q] for lat in latencies) / len(results), 1) for q in PERCENTILES},
        "p99_range": [min(lat["p99"] for lat in latencies), max(lat["p99"] for lat in latencies)],
        **{f"{part}_cores": round(sum(c[part] for c in cores) / len(results), 3) for part in ("bridge", "database")},
    }
