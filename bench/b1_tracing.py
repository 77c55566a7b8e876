"""B1 with tracing: what the bridge's publish spans cost, draining a PostgreSQL backlog to 1 broker.

Three variants, run round-robin ROUNDS times so slow spells of the shared machine spread over all of them:

- tracing off (the default) on a backlog whose every row carries a sampled `traceparent`: the baseline, the
  bridge passing the headers through;
- tracing on over that backlog: a publish span for every event, the most tracing can cost (every write sampled);
- tracing on over B1's own backlog, whose rows carry no trace context: what turning tracing on costs a bridge
  whose writers trace nothing (one look at each record's headers).

Tracing is turned on as users do: OTEL_TRACES_EXPORTER=otlp over HTTP, to a sink in the harness process
(`bench.otlp_sink`) that answers every export and counts the spans, so the table shows how many were exported.
The batch processor's queue is raised from the SDK's 2,048 spans so that a drain at full speed drops none.
"""

from __future__ import annotations

import logging
from typing import Any

from bench.b1_throughput import KEYS, backlog_database
from bench.backlog import Target, round_robin, variant_rows
from bench.context import Context
from bench.otlp_sink import OtlpSink
from bench.stack import KAFKA1, pg_dsn
from bench.workload import Workload, load_postgres

log = logging.getLogger("bench.b1_tracing")

ROUNDS = 2


def tracing_on(endpoint: str) -> dict[str, str | int]:
    """The bridge's environment that turns its publish spans on, exported over OTLP/HTTP to `endpoint`."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_BSP_MAX_QUEUE_SIZE": 200_000,
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 4096,
    }


def traced_database(ctx: Context, events: int) -> str:
    """A backlog like B1's whose every row was written in a sampled trace (created once per run)."""
    if "b1_traced_db" not in ctx.shared:
        url = ctx.scratch.database("b1traced")
        seconds = load_postgres(pg_dsn(url.rsplit("/", 1)[1]), Workload(keys=KEYS, traced=True), events)
        log.info("B1-tracing: loaded %d traced events into PostgreSQL in %.1fs", events, seconds)
        ctx.shared["b1_traced_db"] = url
    return str(ctx.shared["b1_traced_db"])


def run(ctx: Context) -> dict[str, Any]:
    events = ctx.sizes.b1_tracing_events
    if not events:
        return {"skipped": "not run in this mode"}
    untraced_url, loaded = backlog_database(ctx)
    traced = Target(traced_database(ctx, events), KAFKA1, 1, KEYS)
    untraced = Target(untraced_url, KAFKA1, 1, KEYS)
    exported: dict[str, list[int]] = {}
    with OtlpSink() as sink:
        variants: dict[str, tuple[Target, dict[str, str | int]]] = {
            "tracing off, every row traced": (traced, {}),
            "tracing on, every row traced": (traced, tracing_on(sink.endpoint)),
            "tracing on, no row traced": (untraced, tracing_on(sink.endpoint)),
        }
        sink.take()
        rates = round_robin(ctx, "trace", variants, min(events, loaded), ROUNDS,
                            after=lambda name, _result: exported.setdefault(name, []).append(sink.take()))
    shown = {name: {k: v for k, v in settings.items() if k != "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}
             for name, (_target, settings) in variants.items()}
    rows = variant_rows(rates, shown, "tracing off, every row traced", "fraction_of_tracing_off")
    for name, row in rows.items():
        row["spans_exported"] = exported[name]
    return {"events_per_variant": min(events, loaded), "rounds": ROUNDS, "broker": "1 broker", "variants": rows}
