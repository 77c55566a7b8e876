"""B4's row of the summary and its section: `kill -9` under load, events lost and duplicated per crash."""

from __future__ import annotations

from typing import Any

from bench.report.cells import Plots, num, problem, problem_row, problem_section, verdict
from bench.targets import STATED

TITLE = "B4: crash cost"


def summary(bench: dict[str, Any]) -> list[str]:
    b4 = bench.get("B4")
    why = problem(b4)
    if why:
        return [problem_row("B4", "crash cost", why, STATED["B4"])]
    assert b4 is not None
    d = b4["duplicates_per_crash"]
    return [
        f"| B4 | {b4['crashes']} x kill -9 under {b4['writer']['offered_rate']:,}/s | lost {b4['lost']:,}; "
        f"duplicates per crash mean {num(d['mean'])}, max {num(d['max'])} | bound {b4['bound']:,} | "
        f"lost 0, max within bound | {verdict(b4.get('meets_target'))} |"]


def section(results: dict[str, Any], plots: Plots) -> str:
    b4 = results.get("benchmarks", {}).get("B4")
    why = problem(b4)
    if why:
        return problem_section(TITLE, why)
    assert b4 is not None
    s, d = b4["settings"], b4["duplicates_per_crash"]
    lines = [
        f"## {TITLE}",
        "",
        f"{b4['crashes']} times: start `outbox-bridge run`, wait until it holds the lease, let it publish for 2 to 5 s "
        f"(random), `kill -9`. One writer connection commits {b4['writer']['offered_rate']:,} events/s throughout "
        f"({b4['writer']['events']:,} events in all), so commit order is seq order and a lost event could only come "
        "from crash handling. Settings: " + ", ".join(f"`{k}={v}`" for k, v in s.items()) + ". The bound per crash "
        f"is max_in_flight + peak acks per second x persist interval = {s['BRIDGE_MAX_IN_FLIGHT']:,} + "
        f"{b4['peak_acks_per_s']:,} x {s['BRIDGE_PERSIST_INTERVAL_S']} = {b4['bound']:,}.",
        "",
        "| lost | records | duplicates | per crash mean | per crash max | bound | verdict |",
        "|---|---|---|---|---|---|---|",
        f"| {b4['lost']:,} | {b4['records']:,} | {b4['duplicates_total']:,} | {num(d['mean'])} | {num(d['max'])} | "
        f"{b4['bound']:,} | {verdict(b4.get('meets_target'))} |",
    ]
    lines.append(plots.link("crash", "duplicates per crash"))
    return "\n".join(lines) + "\n"
