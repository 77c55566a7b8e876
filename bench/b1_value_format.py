"""B1 with json-schema values: what validating each payload and framing it behind its schema id costs, draining
B1's PostgreSQL backlog to 1 broker.

Two variants, run round-robin ROUNDS times so slow spells of the shared machine spread over both:

- json (the default): the value is the payload as written;
- json-schema: each payload validated against its event type's schema and written behind the schema id
  (Confluent's wire format), the schema registered by the bridge itself (BRIDGE_SCHEMA_DIR) in the local stack's
  registry (Apicurio). The schema names every field of B1's payloads, with their types, and allows no others, so
  the validation is the full one a strict schema asks for.
"""

from __future__ import annotations

import json
from typing import Any

from bench.b1_throughput import KEYS, backlog_database
from bench.backlog import Target, round_robin, variant_rows
from bench.context import Context
from bench.stack import KAFKA1, schema_registry_url
from bench.workload import EVENT_TYPE

ROUNDS = 2

#: B1's payloads (`bench.workload.Workload.payload`), field by field.
SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": EVENT_TYPE,
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "n": {"type": "integer", "minimum": 0},
        "amount_cents": {"type": "integer", "minimum": 0},
        "pad": {"type": "string"},
    },
    "required": ["order_id", "n", "amount_cents", "pad"],
    "additionalProperties": False,
}


def run(ctx: Context) -> dict[str, Any]:
    events = ctx.sizes.b1_formats_events
    if not events:
        return {"skipped": "not run in this mode"}
    url, loaded = backlog_database(ctx)
    events = min(events, loaded)
    target = Target(url, KAFKA1, 1, KEYS)
    schemas = ctx.raw("schemas")
    schemas.mkdir(parents=True, exist_ok=True)
    (schemas / f"{EVENT_TYPE}.json").write_text(json.dumps(SCHEMA))
    variants: dict[str, tuple[Target, dict[str, str | int]]] = {
        "json (the default)": (target, {}),
        "json-schema, validated and framed": (target, {
            "BRIDGE_VALUE_FORMAT": "json-schema",
            "BRIDGE_SCHEMA_REGISTRY_URL": schema_registry_url(),
            "BRIDGE_SCHEMA_DIR": str(schemas),
        }),
    }
    rates = round_robin(ctx, "format", variants, events, ROUNDS)
    shown = {name: {k: v for k, v in settings.items() if k == "BRIDGE_VALUE_FORMAT"}
             for name, (_target, settings) in variants.items()}
    rows = variant_rows(rates, shown, "json (the default)", "fraction_of_json")
    return {"events_per_variant": events, "rounds": ROUNDS, "broker": "1 broker", "variants": rows}
