"""B3's rows of the summary and its section: commit-to-ack latency at each offered rate, judged at one."""

from __future__ import annotations

from typing import Any

from bench.report.cells import DASH, Plots, num, problem, problem_row, problem_section, verdict
from bench.targets import B3_P99_MS, B3_RATE, STATED

TITLE = "B3: commit-to-ack latency"


def summary(bench: dict[str, Any]) -> list[str]:
    b3 = bench.get("B3")
    why = problem(b3)
    if why:
        return [problem_row("B3", "commit-to-ack latency", why, STATED["B3"])]
    assert b3 is not None
    rows = []
    for rate, r in b3["rates"].items():
        lat = r["latency_ms"]
        at_target = int(rate) == B3_RATE
        lost = f"; **{r['lost']:,} event{'s' if r['lost'] != 1 else ''} lost**" if r.get("lost") else ""
        rows.append(
            f"| B3 | latency at {int(rate):,}/s offered ({r['writer']['achieved_rate']:,.0f}/s written) | "
            f"p50 {num(lat.get('p50'), 1)}, p95 {num(lat.get('p95'), 1)}, p99 {num(lat.get('p99'), 1)}, "
            f"max {num(lat.get('max'), 1)} ms{lost} | {DASH} | "
            f"{f'p99 <= {B3_P99_MS:.0f} ms' if at_target else 'report what is achieved'} | "
            f"{verdict(b3.get('meets_target')) if at_target else DASH} |")
    return rows


def section(results: dict[str, Any], plots: Plots) -> str:
    b3 = results.get("benchmarks", {}).get("B3")
    why = problem(b3)
    if why:
        return problem_section(TITLE, why)
    assert b3 is not None
    lines = [
        f"## {TITLE}",
        "",
        f"From {b3['measured_from']} to the {b3['measured_to']}. Writers: 8 PostgreSQL connections on an open-loop "
        "schedule (a late commit does not delay the next one's due time), at most 1,000 commits/s in total, so "
        "5,000/s and 20,000/s commit 5 and 20 events per transaction. The first "
        f"{b3['warm_up_excluded_s']:.0f} s are left out (topic check on the first event). Lost = committed events "
        "never published (checked by event_id after the bridge's watermark passed the head).",
        "",
        "| offered | written | events/tx | p50 ms | p95 ms | p99 ms | p99.9 ms | max ms | lost | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rate, r in b3["rates"].items():
        lat, w = r["latency_ms"], r["writer"]
        outcome = verdict(b3.get("meets_target")) if int(rate) == B3_RATE else DASH
        lines.append(
            f"| {int(rate):,}/s | {w['achieved_rate']:,.0f}/s | {w['events_per_tx']} | {num(lat.get('p50'), 1)} | "
            f"{num(lat.get('p95'), 1)} | {num(lat.get('p99'), 1)} | {num(lat.get('p999'), 1)} | "
            f"{num(lat.get('max'), 1)} | {r.get('lost', 0):,} | {outcome} |")
    lines.append(plots.link("latency", "latency percentiles"))
    return "\n".join(lines) + "\n"
