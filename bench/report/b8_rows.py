"""B8-rows' row of the summary and its subsection of B8: per-key order, rolled-back transactions and
crashes for every relay (Debezium, the bridge, and the bridge in exactly-once delivery where a run has it), and
their commit-to-record latency."""

from __future__ import annotations

from typing import Any

from bench.report.b8_debezium import cpu_sum
from bench.report.cells import DASH, Plots, num, problem, problem_row, verdict
from bench.targets import STATED

#: The exactly-once bridge's results, beside the default bridge's where a run has them.
EOS = "bridge-exactly-once"

#: Each row: what it does, what its cells count, and what each relay must reach.
B8_ROWS = {
    "order": ("order: writers interleave on the same aggregates, some transactions held open",
              "inversions (aggregates inverted) of events checked / aggregates", "bridge 0"),
    "rollbacks": ("rollbacks: the same writers, a share of transactions rolled back",
                  "lost / rolled-back published, of committed + rolled back", "0 / 0 for every relay"),
    "crash": ("crash: SIGKILL of the relay process under a steady writer, then a restart",
              "lost, duplicates per crash (total) over crashes",
              "lost 0 for every relay; exactly-once: 0 duplicates"),
}


def summary(bench: dict[str, Any]) -> list[str]:
    b8_rows = bench.get("B8-rows")
    why = problem(b8_rows)
    if why:
        return [problem_row("B8", "order, rollbacks, kill -9", why, STATED["B8-rows"], DASH)]
    assert b8_rows is not None

    def counts(relay: str) -> str:
        outcomes = [b8_rows["rows"].get(row, {}).get(relay, {}) for row in ("order", "rollbacks", "crash")]
        if any("error" in o for o in outcomes):
            return "a row failed"
        order = outcomes[0]
        return (f"{order['inversions']:,} inversions, lost {sum(o['lost'] for o in outcomes)}, leaked "
                f"{outcomes[1]['leaked']}, {num(outcomes[2]['duplicates_per_crash'])} duplicates per crash")

    eos = f"; exactly-once: {counts(EOS)}" if EOS in b8_rows["rows"].get("crash", {}) else ""
    return [f"| B8 | order, rollbacks, kill -9 | {counts('bridge')}{eos} | Debezium {counts('debezium')} | "
            f"{STATED['B8-rows']} | {verdict(b8_rows.get('meets_target'))} |"]


def _b8_cell(row: str, outcome: dict[str, Any] | None) -> str:
    why = problem(outcome)
    if why:
        return why
    assert outcome is not None
    if row == "order":
        return (f"{outcome['inversions']:,} ({outcome['aggregates_inverted']}) of {outcome['events_checked']:,} / "
                f"{outcome['aggregates_checked']}")
    if row == "rollbacks":
        return (f"{outcome['lost']} / {outcome['leaked']} of {outcome['committed_events']:,} + "
                f"{outcome['rolled_back_events']:,}")
    return (f"lost {outcome['lost']}, {num(outcome['duplicates_per_crash'])} per crash ({outcome['duplicates']:,}) "
            f"over {outcome['crashes']}; relaying again {num(outcome.get('relaying_again_after_s'), 1)} s after a kill")


def section(results: dict[str, Any], plots: Plots) -> str:
    rows = results.get("benchmarks", {}).get("B8-rows")
    lines = ["### B8: order, rollbacks and crashes, both relays", ""]
    why = problem(rows)
    if why:
        return "\n".join([*lines, f"{why[0].upper()}{why[1:]}."]) + "\n"
    assert rows is not None
    order, rollbacks = rows["order_writers"], rows["rollbacks_writers"]
    lines += [
        f"Each row has its own database and topic per relay; Debezium runs first (`poll.interval.ms` "
        f"{rows['debezium_tuning'].get('poll.interval.ms', 'default')}), the bridge after, and each topic is read "
        f"back from the beginning with a plain consumer. Order and rollbacks: {order['writers']} connections for "
        f"{rows['row_seconds']:.0f} s inserting 1 to {order['most_events_per_tx']} events per transaction for the "
        f"same {rows['order_aggregates']} aggregates without locking them, {order['hold_share']:.0%} of "
        f"transactions ({rollbacks['hold_share']:.0%} in rollbacks) held open {order['hold_s']} s before they end; "
        f"rollbacks rolls back {rollbacks['rollback_share']:.0%} of its transactions. An inversion is a record "
        "whose `seq` is below an earlier record's of the same key in the same partition. Crash: a writer at "
        f"{rows['crash_writer_rate']:,} events/s while the relay process (the Connect worker's JVM; "
        "`outbox-bridge run`) is killed with SIGKILL and started again; a duplicate is a copy of an event_id "
        "beyond the first. Lost: a committed event_id missing from the topic. Debezium confirms its slot's "
        "position only when the worker commits source offsets (`offset.flush.interval.ms`, Connect's default "
        f"{rows.get('connect_offset_flush_ms', 60_000) / 1000:.0f} s here), so a kill re-sends everything "
        "published since the last commit; the bridge re-sends at most what it acknowledged since its last "
        "watermark persist plus its in-flight window (B4).",
        "",
    ]
    has_eos = EOS in rows["rows"].get("crash", {})
    if has_eos:
        lines += ["The bridge runs twice: with its defaults, and in exactly-once delivery (`BRIDGE_DELIVERY="
                  "exactly-once`), whose records a consumer sees only once their transaction committed; every topic "
                  "is read `read_committed` (a plain consumer's default), so an aborted transaction's records are not "
                  "counted.", ""]
    lines += [
        "| row | counted | Debezium | bridge |" + (" bridge, exactly-once |" if has_eos else "") + " target |",
        "|---|---|---|---|" + ("---|" if has_eos else "") + "---|",
    ]
    for row, (label, counted, target) in B8_ROWS.items():
        outcomes = rows["rows"].get(row, {})
        eos = f" {_b8_cell(row, outcomes.get(EOS))} |" if has_eos else ""
        lines.append(f"| {label} | {counted} | {_b8_cell(row, outcomes.get('debezium'))} | "
                     f"{_b8_cell(row, outcomes.get('bridge'))} |{eos} {target} |")
    lines.append(plots.link("b8_crash", "bridge vs Debezium duplicates, inversions and losses"))
    latency = _b8_latency(rows)
    if latency:
        latency.append(plots.link("b8_latency", "bridge vs Debezium latency"))
    return "\n".join([*lines, *latency]) + "\n"


def _b8_latency_cell(outcome: dict[str, Any] | None) -> str:
    why = problem(outcome)
    if why:
        return why
    assert outcome is not None
    stats = outcome.get("latency_ms", {})
    lost = f", lost {outcome['lost']}" if outcome.get("lost") else ""
    cpu = (f"; {cpu_sum(outcome)} CPU s" if "relay_cpu_s_per_100k" in outcome else "")
    visible = outcome.get("visible_ms")
    if visible:  # a transactional relay: to the read_committed consumer, then (to the append) as the others
        return (f"{num(visible.get('p50'), 1)} / {num(visible.get('p99'), 1)} visible (append "
                f"{num(stats.get('p50'), 1)} / {num(stats.get('p99'), 1)}){lost}{cpu}")
    return f"{num(stats.get('p50'), 1)} / {num(stats.get('p99'), 1)}{lost}{cpu}"


def _b8_latency(rows: dict[str, Any]) -> list[str]:
    latency = rows["rows"].get("latency")
    if not latency:
        return []
    dbz, ours, eos = latency.get("debezium", {}), latency.get("bridge", {}), latency.get(EOS)
    lines = [
        "",
        f"Latency: open-loop writers (as in B3) for {rows.get('latency_seconds', 0):.0f} s per rate; from each "
        "event's commit to its record's LogAppendTime, p50 / p99 in ms, the first second excluded. Debezium "
        "with its default `poll.interval.ms=500` and tuned to 10 ms. After the latencies, the CPU seconds per "
        "100,000 events of relaying that stream, from the writers' start until the relay caught up: the relay's "
        "process + PostgreSQL's work for it (walsender; the bridge's backends) = total.",
        "",
        "| events/s | Debezium default | Debezium tuned | bridge |" + (" bridge, exactly-once |" if eos else ""),
        "|---|---|---|---|" + ("---|" if eos else ""),
    ]
    if eos:
        lines[3:3] = [
            "The exactly-once bridge's records are visible only once their transaction committed: its cell gives "
            "the latency to when a `read_committed` consumer reading along got each record (as B3-delivery), then, "
            "in brackets, to its append as in the other columns.", ""]
    if "error" in dbz or "error" in ours or (eos and "error" in eos):
        eos_cell = f" {_b8_latency_cell(eos)} |" if eos else ""
        return [*lines, f"| all | {_b8_latency_cell(dbz)} | | {_b8_latency_cell(ours)} |{eos_cell}"]
    for rate in sorted(set(dbz) | set(ours), key=int):
        by_variant = dbz.get(rate, {})
        eos_cell = f" {_b8_latency_cell(eos.get(rate, {}).get('default'))} |" if eos else ""
        lines.append(f"| {int(rate):,} | {_b8_latency_cell(by_variant.get('default'))} | "
                     f"{_b8_latency_cell(by_variant.get('tuned'))} | "
                     f"{_b8_latency_cell(ours.get(rate, {}).get('default'))} |{eos_cell}")
    return lines
