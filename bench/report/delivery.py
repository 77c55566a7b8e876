"""B1-delivery's and B3-delivery's rows of the summary and their section: what exactly-once delivery costs in
throughput and in commit-to-visible latency, beside at-least-once (the default) and Debezium (B8) of this run."""

from __future__ import annotations

from typing import Any

from bench.report.cells import DASH, Plots, num, problem

TITLE = "Exactly-once delivery: what it costs"


def summary(bench: dict[str, Any]) -> list[str]:
    rows = []
    b1 = bench.get("B1-delivery")
    if not problem(b1) and b1 is not None and b1.get("variants"):
        default, eos = b1["variants"].values()
        rows.append(f"| B1-delivery | backlog drain, exactly-once ({b1['events_per_variant']:,} events) | "
                    f"{num(eos['bridge_events_per_s'])} events/s | at-least-once {num(default['bridge_events_per_s'])}"
                    f" events/s ({eos['fraction_of_default']:.0%}) | report the cost | {DASH} |")
    b3 = bench.get("B3-delivery")
    if not problem(b3) and b3 is not None and b3.get("modes"):
        (_, default), (_, eos) = b3["modes"].items()
        for rate in eos:
            mine, theirs = eos[rate]["visible_ms"], default.get(rate, {}).get("visible_ms", {})
            rows.append(f"| B3-delivery | commit to visible (read_committed), exactly-once at {int(rate):,}/s | "
                        f"p50 {num(mine.get('p50'), 1)}, p99 {num(mine.get('p99'), 1)} ms | at-least-once p50 "
                        f"{num(theirs.get('p50'), 1)}, p99 {num(theirs.get('p99'), 1)} ms | report the cost | {DASH} |")
    return rows


def section(results: dict[str, Any], plots: Plots) -> str:
    bench = results.get("benchmarks", {})
    b1, b3 = bench.get("B1-delivery"), bench.get("B3-delivery")
    if (problem(b1) or b1 is None) and (problem(b3) or b3 is None):
        return ""
    lines = [f"## {TITLE}", "",
             "`BRIDGE_DELIVERY=exactly-once` (`bench/b1_delivery.py`, `bench/b3_delivery.py`) beside the default, "
             "with the transaction sizes' defaults (`BRIDGE_TRANSACTION_MAX_EVENTS`, "
             "`BRIDGE_TRANSACTION_INTERVAL_MS`). Both modes are measured the same way, as a `read_committed` "
             "consumer sees them, in one run: compare them with each other. Figures of other sections may come from "
             "other runs (the header lists them), on a less busy machine and without a consumer reading along.", ""]
    if not problem(b1) and b1 is not None and b1.get("variants"):
        lines += [f"Throughput: B1's PostgreSQL backlog, {b1['events_per_variant']:,} events per variant, 1 broker, "
                  f"{b1['rounds']} rounds round-robin, counted by the last stable offsets (mean, and the range of the "
                  "rounds).", "",
                  "| delivery | bridge events/s (range) | of at-least-once | microseconds per event |",
                  "|---|---|---|---|"]
        for name, row in b1["variants"].items():
            low, high = row["bridge_range"]
            lines.append(f"| {name} | {num(row['bridge_events_per_s'])} ({num(low)} to {num(high)}) | "
                         f"{row['fraction_of_default']:.0%} | {row['microseconds_per_event']} |")
        b8 = bench.get("B8")
        if not problem(b8) and b8 is not None:
            lines += ["", f"Debezium in B8 of the same results: {num(b8['debezium']['backlog']['events_per_s'])} "
                          "events/s draining its backlog (at-least-once; Debezium's own exactly-once needs Kafka "
                          "Connect's, KIP-618, not measured here)."]
        lines.append("")
    if not problem(b3) and b3 is not None and b3.get("modes"):
        lines += [f"Latency: from {b3['measured_from']} to {b3['measured_to']} (B3's writers and warm-up).", "",
                  "| delivery | offered | to append p50 / p99 ms | to read_committed consumer p50 / p99 / max ms "
                  "| lost |",
                  "|---|---|---|---|---|"]
        for name, rates in b3["modes"].items():
            for rate, r in rates.items():
                app, vis = r["latency_ms"], r["visible_ms"]
                lines.append(f"| {name} | {int(rate):,}/s | {num(app.get('p50'), 1)} / {num(app.get('p99'), 1)} | "
                             f"{num(vis.get('p50'), 1)} / {num(vis.get('p99'), 1)} / {num(vis.get('max'), 1)} | "
                             f"{r.get('lost', 0):,} |")
        lines.append("")
    return "\n".join(lines) + "\n"
