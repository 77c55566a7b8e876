"""B5's rows of the summary and its section: each projection kind draining a topic, beside a bare MERGE."""

from __future__ import annotations

from typing import Any

from bench.report.batch_profile import profile_lines
from bench.report.cells import Plots, num, problem, problem_row, problem_section, verdict
from bench.targets import B5_FIRST_ROUND_EVENTS_PER_S, B5_FRACTION, STATED, b5_fraction, b5_within

TITLE = "B5: projection throughput"


def summary(bench: dict[str, Any]) -> list[str]:
    b5 = bench.get("B5")
    why = problem(b5)
    if why:
        return [problem_row("B5", "projection throughput", why, STATED["B5"])]
    assert b5 is not None
    return [
        f"| B5 | `{kind}`, {b5['events']:,} events, {b5['keys']:,} keys | "
        f"{num(k['projection']['events_per_s'])} events/s | {num(k['baseline']['events_per_s'])} events/s "
        f"(bare MERGE) | {STATED['B5']} (got {b5_fraction(k):.2f}) | {verdict(b5_within(k))} |"
        for kind, k in b5["kinds"].items()]


def section(results: dict[str, Any], plots: Plots) -> str:
    b5 = results.get("benchmarks", {}).get("B5")
    why = problem(b5)
    if why:
        return problem_section(TITLE, why)
    assert b5 is not None
    lines = [
        f"## {TITLE}",
        "",
        f"{b5['events']:,} events over {b5['keys']:,} keys in a {b5['partitions']}-partition topic (written by the "
        "bare producer beforehand), drained by an availableNow query with maxOffsetsPerTrigger "
        f"{b5['max_offsets_per_trigger']:,} "
        "on local[2]. Measured: " + b5["measured"] + ". The projection is the project's own "
        "(`projections.runner.start`); the baseline is a bare foreachBatch MERGE (`bench/spark_jobs.py`), the "
        "least a correct projection does: for `latest_state` the newest event per key with the seq guard, for "
        "`event_log` an insert of the events whose event_id the table lacks, each row as wide as the kind's "
        "(the raw payload and the extra headers beside the payload's columns).",
        "",
        f"Target (#12): the projection at {B5_FRACTION} of the bare MERGE's events/s or better, both "
        f"measured in this run; the first round's absolute {B5_FIRST_ROUND_EVENTS_PER_S:,} events/s is shown too.",
        "",
        "| kind | projection events/s | batches | batch s (mean / max) | baseline events/s | baseline batch s "
        f"(mean / max) | projection / baseline | verdict | >= {B5_FIRST_ROUND_EVENTS_PER_S:,} events/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, k in b5["kinds"].items():
        p, q = k["projection"], k["baseline"]
        lines.append(
            f"| `{kind}` | {num(p['events_per_s'])} | {p['batches']} | {p['batch_seconds']['mean']} / "
            f"{p['batch_seconds']['max']} | {num(q['events_per_s'])} | {q['batch_seconds']['mean']} / "
            f"{q['batch_seconds']['max']} | {b5_fraction(k):.2f} | {verdict(b5_within(k))} | "
            f"{verdict(p['events_per_s'] >= B5_FIRST_ROUND_EVENTS_PER_S)} |")
    lines.append(plots.link("projection", "projection throughput"))
    for kind, k in b5["kinds"].items():
        if k.get("profile"):
            lines += profile_lines(f"a `{kind}` batch", k["profile"])
    return "\n".join(lines) + "\n"
