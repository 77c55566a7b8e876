"""B3 in exactly-once delivery: commit-to-visible latency for a read_committed consumer, beside at-least-once.

Each delivery mode at 1,000 and 5,000 events/s (B3's writers, `bench.b3_latency.latency_run`), with a
read_committed consumer reading along: latency from the writer's commit to the broker's append of the record (as
B3), and to when that consumer got it. In exactly-once delivery a record is visible only once its transaction
committed, so the second is what read_committed consumers wait; in at-least-once both differ by the consumer's
own fetch.
"""

from __future__ import annotations

import logging
from typing import Any

from bench.b1_delivery import VARIANTS
from bench.b3_latency import latency_run
from bench.context import Context

log = logging.getLogger("bench.b3_delivery")

#: The rates B3-delivery runs at, of B3's.
RATES = (1_000, 5_000)


def run(ctx: Context) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for index, (name, settings) in enumerate(VARIANTS.items()):
        modes[name] = {}
        for rate in (r for r in ctx.sizes.b3_rates if r in RATES):
            result = latency_run(ctx, f"b3d{index}-{rate}", rate, ctx.sizes.b3_seconds, settings, visible=True)
            result.pop("_histogram", None)
            modes[name][str(rate)] = result
            log.info("B3-delivery %s at %d/s: append %s, visible %s", name, rate, result["latency_ms"],
                     result["visible_ms"])
    return {"measured_from": "time.time() when the writer's transaction has committed",
            "measured_to": "the broker's LogAppendTime of the record, and the time a read_committed consumer "
                           "reading along got it", "modes": modes}
