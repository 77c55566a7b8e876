"""B1: bridge throughput from a PostgreSQL backlog to Kafka, on 1 broker and on 3 (RF=3, min ISR 2).

One database holds the backlog (COPY, then VACUUM ANALYZE, outside the timed part); each variant runs
a bridge under a fresh name, so it starts from watermark 0 on the same rows. The 1-broker run also
samples the bridge's RSS for B7, and a separate, untimed run is profiled with py-spy.
"""

from __future__ import annotations

import logging
from typing import Any

from bench.backlog import Target, bridge_vs_ceiling, drain
from bench.context import Context
from bench.profiling import summarize
from bench.stack import KAFKA1, KAFKA3, brokers_up, pg_dsn, three_brokers
from bench.targets import CEILING_FRACTION
from bench.workload import Workload, load_postgres

log = logging.getLogger("bench.b1")

PROFILE_HZ = 250  # bench.backlog samples at this rate
KEYS = 10_000


def backlog_database(ctx: Context) -> tuple[str, int]:
    """The B1 database (created and loaded once per run) and how many events it holds."""
    if "b1_db" not in ctx.shared:
        sizes = ctx.sizes
        count = max(sizes.b1_events_1broker, sizes.b1_events_3brokers, sizes.b1_tuning_events,
                    sizes.b1_profile_events)
        url = ctx.scratch.database("b1")
        seconds = load_postgres(pg_dsn(url.rsplit("/", 1)[1]), Workload(keys=KEYS), count)
        log.info("B1: loaded %d events into PostgreSQL in %.1fs", count, seconds)
        ctx.shared["b1_db"] = (url, count, seconds)
    url, count, _ = ctx.shared["b1_db"]
    return url, count


def run(ctx: Context) -> dict[str, Any]:
    sizes = ctx.sizes
    url, loaded = backlog_database(ctx)
    result: dict[str, Any] = {
        "target": f">= {CEILING_FRACTION:.0%} of the ceiling",
        "backlog": {"events": loaded, "payload_bytes": 512, "keys": KEYS,
                    "load_seconds": round(ctx.shared["b1_db"][2], 1),
                    "loaded_with": "COPY in 100,000-row transactions, then VACUUM (ANALYZE)"},
        "variants": {},
    }
    one = bridge_vs_ceiling(ctx, "b1-pg-1broker", Target(url, KAFKA1, 1, KEYS), sizes.b1_events_1broker,
                            sample_rss=True, plain_too=True, rounds=sizes.b1_rounds)
    ctx.shared["rss_1m"] = (sizes.b1_events_1broker, one.pop("_rss_samples"))
    result["variants"]["1 broker"] = one
    with three_brokers(ctx.scratch):
        result["variants"]["3 brokers"] = _three_brokers(ctx, url, sizes.b1_events_3brokers)
    for variant in result["variants"].values():
        if "fraction_of_ceiling" in variant:
            variant["meets_target"] = variant["fraction_of_ceiling"] >= CEILING_FRACTION
    if sizes.b1_profile_events:
        result["profile"] = profile(ctx, "b1-pg-profile", url, sizes.b1_profile_events)
    return result


def _three_brokers(ctx: Context, url: str, events: int) -> dict[str, Any]:
    if brokers_up(KAFKA3) != 3:
        return {"skipped": f"the 3-broker cluster at {KAFKA3} did not answer with 3 brokers"}
    three = bridge_vs_ceiling(ctx, "b1-pg-3brokers", Target(url, KAFKA3, 3, KEYS), events, rounds=ctx.sizes.b1_rounds)
    three.pop("_rss_samples")
    if brokers_up(KAFKA3) != 3:
        three["warning"] = "a broker of the 3-broker cluster went away during the run (shared cluster)"
    return three


def profile(ctx: Context, label: str, url: str, events: int) -> dict[str, Any]:
    """An untimed 1-broker drain of the backlog at `url` with py-spy attached; the top of the profile."""
    profiled = drain(ctx, label, Target(url, KAFKA1, 1, KEYS), events, profile=True)
    if profiled.profile is None or not profiled.profile.exists():
        return {"skipped": "py-spy is not installed; `pip install py-spy` to profile the bridge"}
    summary = summarize(profiled.profile)
    summary["events"] = events
    summary["events_per_s_while_profiled"] = round(profiled.events_per_s, 1)
    summary["sampling_hz"] = PROFILE_HZ
    summary["seconds_profiled"] = round(profiled.profile_seconds, 1)
    # py-spy leaves out samples where the thread is idle (blocked in a system call without the GIL).
    summary["busy_share"] = round(summary["samples"] / (PROFILE_HZ * profiled.profile_seconds), 3)
    summary["raw"] = str(profiled.profile)
    return summary
