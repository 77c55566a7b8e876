"""B2: bridge throughput from a SQLite backlog (one big insert transaction, WAL mode) to 1 broker."""

from __future__ import annotations

import logging
from typing import Any

from bench.b1_throughput import KEYS, profile
from bench.backlog import Target, bridge_vs_ceiling
from bench.context import Context
from bench.stack import KAFKA1
from bench.targets import CEILING_FRACTION
from bench.workload import Workload, load_sqlite

log = logging.getLogger("bench.b2")


def run(ctx: Context) -> dict[str, Any]:
    events = ctx.sizes.b2_events
    url = ctx.scratch.sqlite(ctx.raw_dir, "b2")
    seconds = load_sqlite(url.removeprefix("sqlite:///"), Workload(keys=KEYS), events)
    log.info("B2: loaded %d events into SQLite in %.1fs", events, seconds)
    # Rounds, as B1: one round's two ceilings moved from 147,000 to 202,000 events/s (r1206201236).
    result = bridge_vs_ceiling(ctx, "b2-sqlite", Target(url, KAFKA1, 1, KEYS), events, rounds=ctx.sizes.b2_rounds)
    result.pop("_rss_samples")
    if ctx.sizes.b1_profile_events:
        result["profile"] = profile(ctx, "b2-sqlite-profile", url, min(events, ctx.sizes.b1_profile_events))
    result["meets_target"] = result["fraction_of_ceiling"] >= CEILING_FRACTION
    return {"target": f">= {CEILING_FRACTION:.0%} of the ceiling",
            "backlog": {"events": events, "load_seconds": round(seconds, 1),
                        "loaded_with": "one executemany transaction, WAL mode"},
            **result}
