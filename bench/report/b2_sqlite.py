"""B2's row of the summary and its section: a SQLite backlog drained exactly as B1 drains PostgreSQL's."""

from __future__ import annotations

from typing import Any

from bench.report.b1_throughput import profile_lines, read_and_produce_cells, round_lines, warm_up_lines
from bench.report.cells import Plots, num, problem, problem_row, problem_section, share, verdict
from bench.targets import B2_GOAL_FRACTION, STATED

TITLE = "B2: SQLite backlog to Kafka"


def summary(bench: dict[str, Any]) -> list[str]:
    b2 = bench.get("B2")
    why = problem(b2)
    if why:
        return [problem_row("B2", "SQLite backlog to Kafka", why, STATED["B2"])]
    assert b2 is not None
    return [
        f"| B2 | SQLite backlog ({b2['bridge']['events']:,} events), 1 broker | {num(b2['bridge']['events_per_s'])} "
        f"events/s | {num(b2['ceiling']['events_per_s'])} events/s | {STATED['B2']} (got "
        f"{share(b2['fraction_of_ceiling'])}); #33's goal, >= {B2_GOAL_FRACTION:.0%}: "
        f"{verdict(b2['fraction_of_ceiling'] >= B2_GOAL_FRACTION)} | {verdict(b2.get('meets_target'))} |"]


def section(results: dict[str, Any], plots: Plots) -> str:
    b2 = results.get("benchmarks", {}).get("B2")
    why = problem(b2)
    if why:
        return problem_section(TITLE, why)
    assert b2 is not None
    c, b = b2["ceiling"], b2["bridge"]
    return "\n".join([
        f"## {TITLE}",
        "",
        f"{b2['backlog']['events']:,} events in a SQLite file ({b2['backlog']['loaded_with']}, "
        f"{b2['backlog']['load_seconds']} s), drained to the 1-broker cluster exactly as in B1, the bare "
        "read-and-produce loop too: the bridge's own SQLite read (`select_after_sqlite`) and record format, read "
        "and produced in one loop with no ack tracking, lease or metrics, run right after the bridge.",
        "",
        "| events | bridge events/s | bridge MB/s | ceiling before / after | bridge / ceiling | read-and-produce "
        "events/s | bridge / read-and-produce | verdict |",
        "|---|---|---|---|---|---|---|---|",
        f"| {b['events']:,} | {num(b['events_per_s'])} | {num(b['payload_mb_per_s'], 1)} | "
        f"{num(c['before_events_per_s'])} / {num(c['after_events_per_s'])} | {share(b2['fraction_of_ceiling'])} | "
        f"{read_and_produce_cells(b2)} | {verdict(b2.get('meets_target'))} |",
        *warm_up_lines(b2.get("cluster_warm_up"), "1 broker: "),
        *round_lines(b2.get("rounds"), more="; read-and-produce",
                     more_cells=lambda r: f"; {num(r.get('read_and_produce_events_per_s'))}"),
        "",
        *profile_lines(b2.get("profile"), "### Profile of the bridge on SQLite (py-spy)"),
    ]) + "\n"

