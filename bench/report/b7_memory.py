"""B7's row of the summary and its section: the bridge's resident memory while it drains a small and a
large backlog."""

from __future__ import annotations

from typing import Any

from bench.report.cells import DASH, Plots, problem, problem_row, problem_section, verdict
from bench.targets import B7_FLAT_TOLERANCE, B7_PEAK_MB, STATED

TITLE = "B7: bridge memory"


def summary(bench: dict[str, Any]) -> list[str]:
    b7 = bench.get("B7")
    why = problem(b7)
    if why:
        return [problem_row("B7", "bridge peak RSS", why, STATED["B7"])]
    assert b7 is not None
    text = ", ".join(f"{s['peak_mb']} MB at {s['events']:,}" for s in b7["sizes"].values())
    return [f"| B7 | bridge peak RSS during the drain | {text} | {DASH} | {STATED['B7']} "
            f"| {verdict(b7.get('meets_target'))} |"]


def section(results: dict[str, Any], plots: Plots) -> str:
    b7 = results.get("benchmarks", {}).get("B7")
    why = problem(b7)
    if why:
        return problem_section(TITLE, why)
    assert b7 is not None
    lines = [
        f"## {TITLE}",
        "",
        "Resident set size of the `outbox-bridge run` process (psutil, every 0.1 s) while draining a backlog: the "
        "large backlog is B1's 1-broker run, the small one a separate database. Flat means the peaks differ by at "
        f"most {B7_FLAT_TOLERANCE:.0%}.",
        "",
        "| backlog | peak MB | median MB | samples |",
        "|---|---|---|---|",
    ]
    for s in b7["sizes"].values():
        lines.append(f"| {s['events']:,} events | {s['peak_mb']} | {s['median_mb']} | {s['samples']} |")
    if "growth" in b7:
        lines += ["", f"Peak growth from the small to the large backlog: {b7['growth']:+.0%}. Target <= "
                  f"{B7_PEAK_MB} MB and flat: {verdict(b7.get('meets_target'))}."]
    lines.append(plots.link("rss", "RSS over time"))
    return "\n".join(lines) + "\n"
