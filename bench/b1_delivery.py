"""B1 in exactly-once delivery: what a transactional producer costs, draining B1's PostgreSQL backlog to 1 broker.

Two variants, run round-robin ROUNDS times so slow spells of the shared machine spread over both:

- at-least-once (the default): the idempotent producer, each event acknowledged on its own;
- exactly-once: the transactional producer, a transaction committed at BRIDGE_TRANSACTION_MAX_EVENTS events or
  BRIDGE_TRANSACTION_INTERVAL_MS (the defaults), each with a progress record; deliveries count only once committed.

Both are timed as a read_committed consumer sees them: the last stable offsets (`TopicWatch(committed=True)`), so
the exactly-once rate counts an event once its transaction committed. Each transaction's commit marker takes one
offset per partition it wrote, counted with the events (a fraction of a percent at these sizes).
"""

from __future__ import annotations

from typing import Any

from bench.b1_throughput import KEYS, backlog_database
from bench.backlog import Target, round_robin, variant_rows
from bench.context import Context
from bench.stack import KAFKA1

ROUNDS = 2
DEFAULT = "at-least-once (the default)"
VARIANTS: dict[str, dict[str, str | int]] = {DEFAULT: {}, "exactly-once": {"BRIDGE_DELIVERY": "exactly-once"}}


def run(ctx: Context) -> dict[str, Any]:
    events = ctx.sizes.b1_delivery_events
    if not events:
        return {"skipped": "not run in this mode"}
    url, loaded = backlog_database(ctx)
    events = min(events, loaded)
    target = Target(url, KAFKA1, 1, KEYS)
    rates = round_robin(ctx, "delivery", {name: (target, s) for name, s in VARIANTS.items()}, events, ROUNDS,
                        committed=True)
    rows = variant_rows(rates, VARIANTS, DEFAULT, "fraction_of_default")
    return {"events_per_variant": events, "rounds": ROUNDS, "broker": "1 broker", "variants": rows}
