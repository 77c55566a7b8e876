"""B3's rows of the summary and its section: commit-to-ack latency at each offered rate, judged at one."""

from __future__ import annotations

from typing import Any

from bench.report.b1_throughput import warm_up_lines
from bench.report.cells import DASH, Plots, num, problem, problem_row, problem_section, verdict
from bench.targets import B3_GOAL_P99_MS, B3_GOAL_RATES, B3_P99_MS, B3_RATE, STATED

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
        stated = f"p99 <= {B3_P99_MS:.0f} ms" if at_target else "report what is achieved"
        if int(rate) in B3_GOAL_RATES and lat.get("p99") is not None:
            stated += f"; #33's goal, p99 <= {B3_GOAL_P99_MS:.0f} ms: {verdict(lat['p99'] <= B3_GOAL_P99_MS)}"
        rows.append(
            f"| B3 | latency at {int(rate):,}/s offered ({r['writer']['achieved_rate']:,.0f}/s written) | "
            f"p50 {num(lat.get('p50'), 1)}, p95 {num(lat.get('p95'), 1)}, p99 {num(lat.get('p99'), 1)}, "
            f"max {num(lat.get('max'), 1)} ms{lost} | {DASH} | {stated} | "
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
    lines += warm_up_lines(b3.get("cluster_warm_up"), "1 broker: ")
    lines.append(plots.link("latency", "latency percentiles"))
    lines += _tuning(results.get("benchmarks", {}).get("B3-tuning"))
    return "\n".join(lines) + "\n"


def _tuning(tuning: dict[str, Any] | None) -> list[str]:
    """B3-tuning: the read interval, the producer's linger and the persist interval, one at a time
    (`bench/b3_tuning.py`)."""
    if not tuning or problem(tuning) or not tuning.get("rates"):
        return []
    lines = [
        "",
        "### Tuning tried",
        "",
        "What a committed row waits for before its record leaves the bridge: the read interval after a read that "
        "caught up (`BRIDGE_POLL_INTERVAL_MIN_MS`), the producer's linger (`BRIDGE_LINGER_MS`, which the tail no "
        "longer waits out: a read that caught up has its records sent at once), and the checkpoint that persists "
        "the watermark (`BRIDGE_PERSIST_INTERVAL_S`; its statements run on a worker thread beside the loop, which "
        "no longer waits for them). Each variant is a "
        f"run as above of {tuning['seconds_per_run']:.0f} s, {tuning['rounds']} rounds round-robin (mean of the "
        "rounds, and the range of p99); none lost an event. Cores: CPU seconds per second of the bridge process and "
        "of its PostgreSQL sessions while the writers ran. Their cost in throughput: B1's tuning sweep (linger) "
        "above; the read interval does not act on a backlog.",
        "",
        "| offered | variant | settings | p50 ms | p95 ms | p99 ms (range) | max ms | bridge cores | PostgreSQL cores "
        "|",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rate, variants in tuning["rates"].items():
        for name, row in variants.items():
            settings_text = ", ".join(f"`{k}={v}`" for k, v in row["settings"].items()) or "defaults"
            low, high = row["p99_range"]
            lines.append(f"| {int(rate):,}/s | {name} | {settings_text} | {num(row['p50'], 1)} | "
                         f"{num(row['p95'], 1)} | {num(row['p99'], 1)} ({num(low, 1)} to {num(high, 1)}) | "
                         f"{num(row['max'], 1)} | {num(row.get('bridge_cores'), 2)} | "
                         f"{num(row.get('database_cores'), 2)} |")
    return lines
