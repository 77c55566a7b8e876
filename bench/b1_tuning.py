"""B1 tuning sweep: one setting at a time away from the bridge's defaults, on the B1 backlog.

Reader-side settings (read batch, in-flight window) are compared with the default ceiling; producer
settings (linger, batch size, compression) change the ceiling too, so each gets its own.
"""

from __future__ import annotations

import logging
from typing import Any

from bench.b1_throughput import KEYS, backlog_database
from bench.backlog import Target, ceiling, drain
from bench.context import Context
from bench.stack import KAFKA1

log = logging.getLogger("bench.b1_tuning")

# name -> (environment settings, whether they change the producer, so the ceiling)
VARIANTS: dict[str, tuple[dict[str, str | int], bool]] = {
    "defaults": ({}, False),
    "read batch 250": ({"BRIDGE_READ_BATCH_SIZE": 250}, False),
    "read batch 5000": ({"BRIDGE_READ_BATCH_SIZE": 5000}, False),
    "in-flight 50000, read batch 5000": ({"BRIDGE_MAX_IN_FLIGHT": 50_000, "BRIDGE_READ_BATCH_SIZE": 5000}, False),
    "linger 0 ms": ({"BRIDGE_LINGER_MS": 0}, True),
    "linger 50 ms": ({"BRIDGE_LINGER_MS": 50}, True),
    "batch.size 64 KiB": ({"BRIDGE_BATCH_SIZE": 65_536}, True),
    "compression none": ({"BRIDGE_COMPRESSION": "none"}, True),
    "compression zstd": ({"BRIDGE_COMPRESSION": "zstd"}, True),
}


def run(ctx: Context) -> dict[str, Any]:
    events = ctx.sizes.b1_tuning_events
    if not events:
        return {"skipped": "not run in --quick mode"}
    url, _ = backlog_database(ctx)
    target = Target(url, KAFKA1, 1, KEYS)
    default_ceiling = ceiling(ctx, "tune-ceil-defaults", target, events)["events_per_s"]
    rows: dict[str, Any] = {}
    for index, (name, (settings, producer_side)) in enumerate(VARIANTS.items()):
        ceiling_rate = (ceiling(ctx, f"tune-ceil-{index}", target, events, settings)["events_per_s"]
                        if producer_side else default_ceiling)
        bridge = drain(ctx, f"tune-{index}", target, events, settings)
        rows[name] = {
            "settings": settings,
            "bridge_events_per_s": round(bridge.events_per_s, 1),
            "ceiling_events_per_s": round(ceiling_rate, 1),
            "fraction_of_ceiling": round(bridge.events_per_s / ceiling_rate, 3),
        }
        log.info("tuning %-34s bridge %7.0f/s ceiling %7.0f/s", name, bridge.events_per_s, ceiling_rate)
    return {"events_per_variant": events, "broker": "1 broker", "variants": rows}
