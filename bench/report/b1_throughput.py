"""B1's rows of the summary and its section: the PostgreSQL backlog drained beside the bare producer (the
ceiling) and the bare read-and-produce loop, with the tuning tried, tracing off and on, and the bridge's profile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.bridge_process import RUN_QUEUE
from bench.report.cells import DASH, Plots, num, problem, problem_row, problem_section, share, verdict
from bench.targets import B1_ONE_BROKER_FRACTION, STATED

TITLE = "B1: PostgreSQL backlog to Kafka"


def _one_broker_goal(label: str, variant: dict[str, Any]) -> str:
    """The second goal, on one broker only, beside the 80% one."""
    if label != "1 broker":
        return ""
    met = variant["fraction_of_ceiling"] >= B1_ONE_BROKER_FRACTION
    return f"; #33's goal on one broker, >= {B1_ONE_BROKER_FRACTION:.0%}: {verdict(met)}"


def summary(bench: dict[str, Any]) -> list[str]:
    b1 = bench.get("B1")
    why = problem(b1)
    if why:
        return [problem_row("B1", "PostgreSQL backlog to Kafka", why, STATED["B1"])]
    assert b1 is not None
    rows = []
    for label, v in b1["variants"].items():
        why = problem(v)
        if why:
            rows.append(problem_row("B1", f"PostgreSQL, {label}", why, STATED["B1"], DASH))
            continue
        rows.append(
            f"| B1 | PostgreSQL backlog ({v['bridge']['events']:,} events), {label} | "
            f"{num(v['bridge']['events_per_s'])} events/s, {num(v['bridge']['payload_mb_per_s'], 1)} MB/s | "
            f"{num(v['ceiling']['events_per_s'])} events/s, {num(v['ceiling']['payload_mb_per_s'], 1)} MB/s | "
            f"{STATED['B1']} (got {share(v['fraction_of_ceiling'])}){_one_broker_goal(label, v)} | "
            f"{verdict(v.get('meets_target'))} |")
    return rows


def section(results: dict[str, Any], plots: Plots) -> str:
    bench = results.get("benchmarks", {})
    b1 = bench.get("B1")
    why = problem(b1)
    if why:
        return problem_section(TITLE, why)
    assert b1 is not None
    backlog = b1["backlog"]
    lines = [
        f"## {TITLE}",
        "",
        f"Backlog: {backlog['events']:,} events, {backlog['payload_bytes']}-byte JSON payloads, {backlog['keys']:,} "
        f"aggregates (keys), loaded in {backlog['load_seconds']} s ({backlog['loaded_with']}), outside the timed "
        "part. Each variant runs `outbox-bridge run` as a process under a fresh bridge name (watermark 0), on a "
        "topic created beforehand with 6 partitions; its rate is records acknowledged per second between the first "
        "and the last record, read from the topic's high watermarks every 0.1 s. The ceiling is a bare "
        "confluent-kafka producer (`bench/ceiling.py`) with the bridge's own producer settings "
        "(`bridge.kafka.producer_settings`) sending the same records (key, payload, the five headers), built in memory "
        "before the clock starts, measured just before and just after the bridge; the table shows both. The second "
        "ceiling, on PostgreSQL, is the bare read-and-produce loop (`bench/read_produce.py`): the bridge's own query "
        "and record format, read and produced in one loop with no hole rule, ack tracking, lease or metrics, run "
        "right after the bridge; the bridge beside it is what its guarantees cost.",
        "",
        "| variant | events | bridge events/s | bridge MB/s | wall incl. start-up | ceiling before / after | "
        "bridge / ceiling | read-and-produce events/s | bridge / read-and-produce | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, v in b1["variants"].items():
        if problem(v):
            lines.append(f"| {label} | {problem(v)} | | | | | | |")
            continue
        c, b = v["ceiling"], v["bridge"]
        lines.append(
            f"| {label} | {b['events']:,} | {num(b['events_per_s'])} | {num(b['payload_mb_per_s'], 1)} | "
            f"{b['wall_s']} s | "
            f"{num(c['before_events_per_s'])} / {num(c['after_events_per_s'])} | {share(v['fraction_of_ceiling'])} | "
            f"{read_and_produce_cells(v)} | "
            f"{verdict(v.get('meets_target'))} |")
        if v.get("warning"):
            lines.append(f"\nWarning ({label}): {v['warning']}\n")
    core = b1.get("bridge_core")
    if core:
        lines += ["", f"The bridge's per-event core (`bridge.compiled.MODULES`): {core}."]
    for label, v in b1["variants"].items():
        if not isinstance(v, dict):
            continue
        plain = v.get("bridge_plain_python")
        if plain:
            lines.append(f"The same bridge with that core as plain Python ({label}, right after it): "
                         f"{num(plain['events_per_s'])} events/s, {plain['fraction_of_ceiling']:.0%} of the "
                         f"ceiling; compiled, {num(v['bridge']['events_per_s'])} "
                         f"({v['bridge']['events_per_s'] / plain['events_per_s'] - 1:+.0%}).")
        threads = dict(v.get("bridge", {}).get("thread_cpu") or {})
        waited = threads.pop(RUN_QUEUE, None)
        if threads:
            shown = sorted(threads.items(), key=lambda item: -item[1])
            python_share = threads.get("main", 0.0) + threads.get("other Python threads", 0.0)
            lines += [
                "", f"The bridge's CPU by thread ({label}, while records arrived; share of one core): "
                + ", ".join(f"{name} {share:.0%}" for name, share in shown if share >= 0.005)
                + (f". The main thread and the other Python threads take turns on the interpreter's lock: "
                   f"together {python_share:.0%} of one core." if "other Python threads" in threads else
                   ". The bridge runs its Python in the main thread alone.")
                + ("" if waited is None else f" The main thread also waited for a core (runnable, in the run queue) "
                   f"{waited:.0%} of the time.")]
        lines += warm_up_lines(v.get("cluster_warm_up"), f"{label}: ")
        lines += round_lines(v.get("rounds"), f"{label}: ", "; core as plain Python; read-and-produce",
                             lambda r: f"; {num(r.get('plain_python_events_per_s'))}; "
                                       f"{num(r.get('read_and_produce_events_per_s'))}")
    settings = next((v["ceiling"]["producer_settings"] for v in b1["variants"].values() if "ceiling" in v), {})
    if settings:
        shown = {k: v for k, v in settings.items() if k not in ("bootstrap.servers", "client.id")}
        lines += ["", "Producer settings (bridge and ceiling): " + ", ".join(f"`{k}={v}`" for k, v in shown.items())]
    lines.append(plots.link("throughput", "bridge vs ceiling"))
    lines.append(plots.link("b1_timeline", "records acknowledged over time"))
    lines += _tuning(bench.get("B1-tuning"), plots)
    lines += [*_tracing(bench.get("B1-tracing")), ""]
    lines += _formats(bench.get("B1-formats"))
    lines += profile_lines(b1.get("profile"))
    return "\n".join(lines) + "\n"


def read_and_produce_cells(entry: dict[str, Any]) -> str:
    """The bare read-and-produce loop's events/s and the bridge's share of it, as two table cells (dashes for a run
    that did not measure it)."""
    loop = entry.get("read_and_produce")
    if not loop:
        return f"{DASH} | {DASH}"
    return f"{num(loop['events_per_s'])} | {entry['fraction_of_read_and_produce']:.0%}"


def warm_up_lines(warm: dict[str, Any] | None, prefix: str = "") -> list[str]:
    """How the cluster was warmed before the timed runs (`bench.backlog.warm_cluster`); nothing for a run from
    before warming, or a quick one."""
    if not warm or "skipped" in warm:
        return []
    if warm.get("earlier"):
        return ["", f"{prefix}the cluster was warmed earlier in this run (untimed ceiling runs, "
                f"{'settled' if warm['settled'] else 'not settled'})."]
    rates = ", ".join(num(rate) for rate in warm["rates"])
    shares = warm.get("jit_shares") or []
    with_jit = bool(shares) and shares[-1] is not None
    if with_jit:
        settled = f"until its JIT compilers used at most {warm['jit_share_at_most']:.0%} of a core in a run"
    else:
        settled = (f"until {warm['runs_alike']} in a row came within {warm['spread']:.0%} of their best and no "
                   "faster than the runs before them")
    outcome = settled if warm["settled"] else (
        "and had not settled when the time allowed ran out; the runs below measure a cluster still warming")
    each = ", ".join("?" if share is None else f"{share:.2f}" for share in shares)  # ?: jstat did not answer
    jit = f"; the JIT's share of a core in each: {each}" if with_jit else ""
    return ["", f"{prefix}before the timed runs, the cluster was warmed with {len(warm['rates'])} untimed ceiling "
            f"runs of {warm['events']:,} events ({warm['seconds']} s), {outcome}: {rates} events/s{jit}."]


def round_lines(rounds: list[dict[str, Any]] | None, prefix: str = "", more: str = "",
                more_cells: Callable[[dict[str, Any]], str] = lambda _r: "") -> list[str]:
    """Every round of a drain run in rounds (`bench.backlog.bridge_vs_ceiling`), with `more` columns named in the
    heading and given by `more_cells`."""
    if not rounds:
        return []
    return ["", f"{prefix}{len(rounds)} rounds of the whole sequence; the table shows the round with the median "
            f"bridge / ceiling. Every round (bridge events/s, ceiling before / after, bridge / ceiling{more}):", "",
            *(f"- round {i}: {num(r['bridge_events_per_s'])}, {num(r['ceiling_before_events_per_s'])} / "
              f"{num(r['ceiling_after_events_per_s'])}, **{share(r['fraction_of_ceiling'])}**{more_cells(r)}"
              for i, r in enumerate(rounds, 1))]


def _tuning(tuning: dict[str, Any] | None, plots: Plots) -> list[str]:
    """B1-tuning: one setting changed at a time, each beside its own ceiling."""
    lines: list[str] = []
    if tuning and not problem(tuning) and tuning.get("variants"):
        lines += [
            "### Tuning tried",
            "",
            f"One setting changed at a time from the defaults, {tuning['events_per_variant']:,} events each, 1 broker, "
            f"{tuning.get('rounds', 1)} rounds round-robin (mean, and the range of the rounds). Producer settings "
            "change the ceiling too, so those rows have their own ceiling.",
            "",
            "| variant | settings | bridge events/s (range) | ceiling events/s | bridge / ceiling |",
            "|---|---|---|---|---|",
        ]
        for name, row in tuning["variants"].items():
            settings_text = ", ".join(f"`{k}={v}`" for k, v in row["settings"].items()) or "defaults"
            spread = row.get("bridge_range")
            spread_text = f" ({num(spread[0])} to {num(spread[1])})" if spread else ""
            lines.append(f"| {name} | {settings_text} | {num(row['bridge_events_per_s'])}{spread_text} | "
                         f"{num(row['ceiling_events_per_s'])} | {row['fraction_of_ceiling']:.0%} |")
        lines.append(plots.link("tuning", "tuning sweep"))
    return lines


def _tracing(tracing: dict[str, Any] | None) -> list[str]:
    """B1-tracing: the publish spans off and on (`bench/b1_tracing.py`)."""
    if not tracing or problem(tracing) or not tracing.get("variants"):
        return []
    return _variants(
        "Tracing",
        f"The bridge with its publish spans off and on (`bench/b1_tracing.py`), {tracing['events_per_variant']:,} "
        f"events each, 1 broker, {tracing.get('rounds', 1)} rounds round-robin (mean, and the range of the rounds); "
        "spans exported over OTLP/HTTP to a sink in the harness.",
        ["of tracing off", "spans exported per round"],
        {name: [f"{row['fraction_of_tracing_off']:.0%}", ", ".join(num(n) for n in row["spans_exported"])]
         for name, row in tracing["variants"].items()},
        tracing["variants"],
    )


def _formats(formats: dict[str, Any] | None) -> list[str]:
    """B1-formats: json values beside json-schema values (`bench/b1_value_format.py`)."""
    if not formats or problem(formats) or not formats.get("variants"):
        return []
    lines = _variants(
        "Value formats",
        f"The bridge with `BRIDGE_VALUE_FORMAT` json (the default) and json-schema (each payload validated against "
        f"a strict schema of every field, then framed behind its schema id; the schema registered by the bridge in "
        f"the stack's Apicurio registry), `bench/b1_value_format.py`, {formats['events_per_variant']:,} events each, "
        f"1 broker, {formats.get('rounds', 1)} rounds round-robin (mean, and the range of the rounds).",
        ["of json", "microseconds per event"],
        {name: [f"{row['fraction_of_json']:.0%}", str(row["microseconds_per_event"])]
         for name, row in formats["variants"].items()},
        formats["variants"],
    )
    base, *others = formats["variants"].values()
    for row in others:
        extra = row["microseconds_per_event"] - base["microseconds_per_event"]
        lines += ["", f"json-schema values cost {extra:.1f} microseconds more per event than json ones here."]
    return [*lines, ""]


def _variants(title: str, intro: str, columns: list[str], cells: dict[str, list[str]],
              variants: dict[str, Any]) -> list[str]:
    """A section of variants run round-robin: each one's mean rate and the range of its rounds, then `cells`."""
    lines = [f"### {title}", "", intro, "",
             "| variant | bridge events/s (range) | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
    for name, row in variants.items():
        low, high = row["bridge_range"]
        lines.append(f"| {name} | {num(row['bridge_events_per_s'])} ({num(low)} to {num(high)}) | "
                     + " | ".join(cells[name]) + " |")
    return lines


def profile_lines(profile: dict[str, Any] | None, heading: str = "### Profile of the bridge (py-spy)") -> list[str]:
    """Where the bridge's time goes (py-spy), as self time by line beside inclusive time by function."""
    lines: list[str] = []
    if profile and profile.get("self"):
        lines += [
            heading,
            "",
            f"A separate, untimed drain of {profile['events']:,} events with py-spy attached at "
            f"{profile['sampling_hz']} Hz for {profile['seconds_profiled']} s ({profile['samples']:,} samples, "
            f"{num(profile['events_per_s_while_profiled'])} events/s while profiled)."
            + (f" The main thread was busy (not idle in a system call) in {profile['busy_share']:.0%} of the "
               "sampling time." if "busy_share" in profile else "") + " Share of samples:",
            "",
            "| self time (line) | share | | inclusive time (function) | share |",
            "|---|---|---|---|---|",
        ]
        inclusive = [e for e in profile["inclusive"] if e["share"] < 0.97][:15]
        own = profile["self"][:15]
        for i in range(max(len(own), len(inclusive))):
            left = _profile_cells(own[i] if i < len(own) else None)
            right = _profile_cells(inclusive[i] if i < len(inclusive) else None)
            lines.append(f"| {left} | | {right} |")
    elif profile:
        lines += ["### Profile", "", profile.get("skipped", "")]
    return lines


def _profile_cells(entry: dict[str, Any] | None) -> str:
    return f"`{entry['function']}` | {entry['share']:.1%}" if entry else " | "

