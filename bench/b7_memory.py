"""B7: the bridge's peak RSS while draining a backlog, at two backlog sizes: it should not grow with it.

The large size is B1's 1-broker run (sampled there); the small one is drained here from its own
database. RSS is psutil's resident set size of the `outbox-bridge run` process, every 0.1 s.
"""

from __future__ import annotations

from typing import Any

from bench.b1_throughput import KEYS
from bench.backlog import Target, drain
from bench.context import Context
from bench.stack import KAFKA1, pg_dsn
from bench.targets import B7_FLAT_TOLERANCE, B7_PEAK_MB
from bench.workload import Workload, load_postgres


def _summary(events: int, samples: list[tuple[float, int]]) -> dict[str, Any]:
    values = [rss for _, rss in samples]
    return {
        "events": events,
        "peak_mb": round(max(values) / 2**20, 1),
        "median_mb": round(sorted(values)[len(values) // 2] / 2**20, 1),
        "samples": len(values),
    }


def run(ctx: Context) -> dict[str, Any]:
    small = ctx.sizes.b7_small_events
    url = ctx.scratch.database("b7")
    load_postgres(pg_dsn(url.rsplit("/", 1)[1]), Workload(keys=KEYS), small)
    small_run = drain(ctx, "b7-small", Target(url, KAFKA1, 1, KEYS), small, sample_rss=True)
    result: dict[str, Any] = {"target": f"<= {B7_PEAK_MB} MB, flat with backlog size",
                              "sizes": {"small": _summary(small, small_run.rss_samples)},
                              "_rss": {"small": small_run.rss_samples}}
    if "rss_1m" in ctx.shared:
        large, samples = ctx.shared["rss_1m"]
        result["sizes"]["large"] = _summary(large, samples)
        result["_rss"]["large"] = samples
        peak_small, peak_large = result["sizes"]["small"]["peak_mb"], result["sizes"]["large"]["peak_mb"]
        result["growth"] = round(peak_large / peak_small - 1, 3)
        result["flat"] = abs(result["growth"]) <= B7_FLAT_TOLERANCE
        result["meets_target"] = max(peak_small, peak_large) <= B7_PEAK_MB and result["flat"]
    else:
        result["note"] = "run B1 in the same run for the large backlog's RSS"
    return result
