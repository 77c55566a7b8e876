"""B1 tuning sweep: one setting at a time away from the bridge's defaults, on the B1 backlog.

Reader-side settings (read batch, in-flight window) are compared with the default ceiling; producer
settings (linger, batch size, compression) change the ceiling too, so each gets its own. The variants
run round-robin, ROUNDS times, so slow spells of the shared machine spread over all of them; the table
gives the mean and the range.
"""

from __future__ import annotations

import logging
from typing import Any

from bench.b1_throughput import KEYS, backlog_database
from bench.backlog import Target, ceiling, drain
from bench.context import Context
from bench.stack import KAFKA1

log = logging.getLogger("bench.b1_tuning")

ROUNDS = 2

# name -> (environment settings, whether they change the producer, so the ceiling)
VARIANTS: dict[str, tuple[dict[str, str | int], bool]] = {
    "defaults": ({}, False),
    "read batch 2500": ({"BRIDGE_READ_BATCH_SIZE": 2500}, False),
    "read batch 5000": ({"BRIDGE_READ_BATCH_SIZE": 5000}, False),
    "in-flight 50000, read batch 5000": ({"BRIDGE_MAX_IN_FLIGHT": 50_000, "BRIDGE_READ_BATCH_SIZE": 5000}, False),
    "linger 0 ms": ({"BRIDGE_LINGER_MS": 0}, True),
    "batch.size 64 KiB": ({"BRIDGE_BATCH_SIZE": 65_536}, True),
    "read batch 5000, batch.size 64 KiB": ({"BRIDGE_READ_BATCH_SIZE": 5000, "BRIDGE_BATCH_SIZE": 65_536}, True),
}


def run(ctx: Context) -> dict[str, Any]:
    events = ctx.sizes.b1_tuning_events
    if not events:
        return {"skipped": "not run in --quick mode"}
    url, _ = backlog_database(ctx)
    target = Target(url, KAFKA1, 1, KEYS)
    bridge: dict[str, list[float]] = {name: [] for name in VARIANTS}
    ceilings: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_number in range(1, ROUNDS + 1):
        default_ceiling = ceiling(ctx, f"tune{round_number}-ceil", target, events)["events_per_s"]
        for index, (name, (settings, producer_side)) in enumerate(VARIANTS.items()):
            label = f"tune{round_number}-{index}"
            ceilings[name].append(ceiling(ctx, f"{label}-ceil", target, events, settings)["events_per_s"]
                                  if producer_side else default_ceiling)
            bridge[name].append(drain(ctx, label, target, events, settings).events_per_s)
            log.info("tuning round %d %-34s bridge %7.0f/s ceiling %7.0f/s", round_number, name, bridge[name][-1],
                     ceilings[name][-1])
    rows: dict[str, Any] = {}
    for name, (settings, _) in VARIANTS.items():
        mean_bridge = sum(bridge[name]) / len(bridge[name])
        mean_ceiling = sum(ceilings[name]) / len(ceilings[name])
        rows[name] = {
            "settings": settings,
            "bridge_events_per_s": round(mean_bridge, 1),
            "bridge_range": [round(min(bridge[name])), round(max(bridge[name]))],
            "ceiling_events_per_s": round(mean_ceiling, 1),
            "fraction_of_ceiling": round(mean_bridge / mean_ceiling, 3),
        }
    return {"events_per_variant": events, "rounds": ROUNDS, "broker": "1 broker", "variants": rows}
