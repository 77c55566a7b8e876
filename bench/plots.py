"""The report's plots (PNG, matplotlib's Agg backend), drawn from the stored results and samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from bench.report.b8_debezium import database_cpu
from bench.targets import B3_P99_MS, B3_RATE, B5_FIRST_ROUND_EVENTS_PER_S, B6_AIM_S, B7_PEAK_MB, CEILING_FRACTION

BRIDGE, CEILING, TARGET = "#1f77b4", "#bbbbbb", "#d62728"
# Debezium with B8's connector tuning is a darker grey than a ceiling, being a peer rather than a bound; Debezium's
# defaults (B8 latency) are drawn in the ceiling's grey, hatched.
DEBEZIUM = "#777777"
B8_PHASES = {"backlog": "backlog drain\n(Debezium warm)", "concurrent": "inserts running\nconcurrently",
             "restart": "first N after\na restart"}


def draw(results: dict[str, Any], samples: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Draw every plot the results allow; return name -> path of the PNGs written."""
    bench = results.get("benchmarks", {})
    images: dict[str, Path] = {}
    for name, painter in (("throughput", _throughput), ("tuning", _tuning), ("b1_timeline", _timeline),
                          ("latency", _latency), ("crash", _crash), ("projection", _projection),
                          ("end_to_end", _end_to_end), ("rss", _rss), ("b8_throughput", _b8_throughput),
                          ("b8_cpu", _b8_cpu), ("b8_latency", _b8_latency), ("b8_crash", _b8_crash)):
        figure = painter(bench, samples)
        if figure is None:
            continue
        path = out_dir / f"{name}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(figure)
        images[name] = path
    return images


def _ok(entry: Any) -> bool:
    return isinstance(entry, dict) and "error" not in entry and "skipped" not in entry


def _pair(axis: Any, i: int, values: tuple[float, float], colours: tuple[str, str], labels: tuple[str, str],
          texts: tuple[str, str] | None = None) -> None:
    """Two bars side by side at x = i, each with its value (or `texts`) above it; legend labels on the first pair."""
    for x, value, colour, label, text in zip((i - 0.2, i + 0.2), values, colours, labels,
                                             texts or tuple(f"{v:,.0f}" for v in values), strict=True):
        axis.bar(x, value, 0.4, color=colour, label=label if i == 0 else None)
        axis.annotate(text, (x, value), ha="center", va="bottom", fontsize=8)


def _throughput(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    groups: list[tuple[str, dict[str, Any]]] = []
    for label, variant in bench.get("B1", {}).get("variants", {}).items():
        if _ok(variant) and "bridge" in variant:
            groups.append((f"B1 PostgreSQL\n{label}", variant))
    if _ok(bench.get("B2")) and "bridge" in bench["B2"]:
        groups.append(("B2 SQLite\n1 broker", bench["B2"]))
    if not groups:
        return None
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for i, (_, variant) in enumerate(groups):
        bridge, ceiling = variant["bridge"]["events_per_s"], variant["ceiling"]["events_per_s"]
        _pair(axis, i, (bridge, ceiling), (BRIDGE, CEILING), ("bridge", "ceiling (bare producer)"),
              (f"{bridge:,.0f}\n({variant['fraction_of_ceiling']:.0%})", f"{ceiling:,.0f}"))
        axis.hlines(CEILING_FRACTION * ceiling, i - 0.4, i + 0.4, colors=TARGET, linestyles="dashed",
                    label=f"target: {CEILING_FRACTION:.0%} of ceiling" if i == 0 else None)
    axis.set_xticks(range(len(groups)), [g[0] for g in groups])
    axis.set_ylabel("events/s (512-byte payloads)")
    axis.set_title("Backlog drain: bridge vs bare producer, same run")
    axis.legend(fontsize=8)
    return figure


def _tuning(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    variants = bench.get("B1-tuning", {}).get("variants")
    if not variants:
        return None
    names = list(variants)
    figure, axis = plt.subplots(figsize=(8, 0.45 * len(names) + 1.2))
    for i, name in enumerate(names):
        row = variants[name]
        axis.barh(i, row["bridge_events_per_s"], color=BRIDGE, label="bridge" if i == 0 else None)
        axis.plot(row["ceiling_events_per_s"], i, "d", color="#555555", label="ceiling" if i == 0 else None)
        axis.annotate(f" {row['bridge_events_per_s']:,.0f} ({row['fraction_of_ceiling']:.0%})",
                      (row["bridge_events_per_s"], i), va="center", fontsize=8)
    axis.set_yticks(range(len(names)), names)
    axis.invert_yaxis()
    axis.set_xlabel("events/s")
    axis.set_title("B1 tuning: one setting changed at a time (1 broker)")
    axis.legend(fontsize=8, loc="lower right")
    return figure


def _timeline(_: dict[str, Any], samples: dict[str, Any]) -> Any:
    series = {key: value for key, value in samples.items() if key.startswith("B1/") and key.endswith("_rate_samples")}
    if not series:
        return None
    figure, axis = plt.subplots(figsize=(8, 4))
    for key, points in sorted(series.items()):
        label = key.split("/")[2]
        axis.plot([t for t, _ in points], [n for _, n in points], label=label)
    axis.set_xlabel("seconds since the bridge process started")
    axis.set_ylabel("records acknowledged")
    axis.set_title("B1: records in the topic over time")
    axis.legend(fontsize=8)
    return figure


def _latency(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    rates = bench.get("B3", {}).get("rates")
    if not rates:
        return None
    keys = ("p50", "p95", "p99", "max")
    figure, axis = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(keys)
    for i, row in enumerate(rates.values()):
        for j, key in enumerate(keys):
            value = row["latency_ms"].get(key)
            if value is None:
                continue
            axis.bar(i + (j - 1.5) * width, max(value, 0.1), width, color=plt.cm.Blues(0.35 + 0.2 * j),
                     label=key if i == 0 else None)
            axis.annotate(f"{value:,.0f}", (i + (j - 1.5) * width, max(value, 0.1)), ha="center", va="bottom",
                          fontsize=7)
    axis.axhline(B3_P99_MS, color=TARGET, linestyle="dashed", label=f"target p99 at {B3_RATE:,}/s: {B3_P99_MS:.0f} ms")
    axis.set_yscale("log")
    axis.set_xticks(range(len(rates)), [f"{int(rate):,}/s offered\n{row['writer']['achieved_rate']:,.0f}/s written"
                                        for rate, row in rates.items()])
    axis.set_ylabel("commit to LogAppendTime (ms, log scale)")
    axis.set_title("B3: commit-to-ack latency under steady writers")
    axis.legend(fontsize=8)
    return figure


def _crash(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    b4 = bench.get("B4", {})
    kills = b4.get("kills")
    if not kills:
        return None
    figure, axis = plt.subplots(figsize=(8, 4))
    axis.bar([k["crash"] for k in kills], [k["duplicates"] for k in kills], color=BRIDGE, label="duplicates")
    axis.axhline(b4["bound"], color=TARGET, linestyle="dashed", label=f"bound {b4['bound']:,}")
    axis.set_xlabel("crash (kill -9)")
    axis.set_ylabel("records sent twice")
    axis.set_title(f"B4: duplicates per crash; lost: {b4['lost']}")
    axis.legend(fontsize=8)
    return figure


def _projection(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    kinds = bench.get("B5", {}).get("kinds")
    if not kinds:
        return None
    figure, axis = plt.subplots(figsize=(7, 4))
    for i, row in enumerate(kinds.values()):
        values = (row["projection"]["events_per_s"], row["baseline"]["events_per_s"])
        _pair(axis, i, values, (BRIDGE, CEILING), ("projection", "bare MERGE baseline"))
    axis.axhline(B5_FIRST_ROUND_EVENTS_PER_S, color=TARGET, linestyle="dashed",
                 label=f"target {B5_FIRST_ROUND_EVENTS_PER_S:,}/s")
    axis.set_yscale("log")
    axis.set_xticks(range(len(kinds)), list(kinds))
    axis.set_ylabel("events/s (log scale)")
    axis.set_title("B5: projection throughput on local[2]")
    axis.legend(fontsize=8)
    return figure


def _end_to_end(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    b6 = bench.get("B6", {})
    if not b6.get("latency_s"):
        return None
    keys = ("p50", "p95", "p99", "max")
    series = [("commit to row visible", b6["latency_s"]), ("commit to Kafka", b6["commit_to_kafka_s"]),
              ("Kafka to Delta", b6["kafka_to_delta_s"])]
    if b6.get("baseline"):
        series.append(("commit to row visible, bare MERGE", b6["baseline"]["latency_s"]))
    figure, axis = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(series)
    for j, (label, values) in enumerate(series):
        axis.bar([i + (j - (len(series) - 1) / 2) * width for i in range(len(keys))],
                 [values.get(k, 0) for k in keys], width, label=label,
                 color=CEILING if "bare" in label else plt.cm.Greens(0.4 + 0.25 * j))
    axis.axhline(B6_AIM_S[0], color=TARGET, linestyle="dotted", label=f"target p50 {B6_AIM_S[0]:.0f} s")
    axis.axhline(B6_AIM_S[1], color=TARGET, linestyle="dashed", label=f"target p99 {B6_AIM_S[1]:.0f} s")
    axis.set_xticks(range(len(keys)), keys)
    axis.set_ylabel("seconds")
    axis.set_title(f"B6: end to end at {b6['writer']['offered_rate']:,} events/s")
    axis.legend(fontsize=8)
    return figure


def _rss(bench: dict[str, Any], samples: dict[str, Any]) -> Any:
    series = samples.get("B7/_rss")
    if not series:
        return None
    sizes = bench.get("B7", {}).get("sizes", {})
    figure, axis = plt.subplots(figsize=(8, 4))
    for name, points in series.items():
        events = sizes.get(name, {}).get("events", 0)
        axis.plot([t for t, _ in points], [rss / 2**20 for _, rss in points], label=f"{events:,}-event backlog")
    axis.axhline(B7_PEAK_MB, color=TARGET, linestyle="dashed", label=f"target {B7_PEAK_MB} MB")
    axis.set_xlabel("seconds since the bridge process started")
    axis.set_ylabel("RSS (MB)")
    axis.set_ylim(bottom=0)
    axis.set_title("B7: bridge resident memory while draining a backlog")
    axis.legend(fontsize=8)
    return figure


def _settings(settings: dict[str, str] | None) -> str:
    return f" ({', '.join(f'{k}={v}' for k, v in settings.items())})" if settings else ""


def _b8_phases(bench: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, bridge, Debezium) for each B8 phase both relays measured."""
    b8: dict[str, Any] = bench.get("B8") or {}
    if not _ok(b8):
        return []
    return [(label, b8["bridge"][phase], b8["debezium"][phase]) for phase, label in B8_PHASES.items()
            if _ok(b8.get("bridge", {}).get(phase)) and _ok(b8.get("debezium", {}).get(phase))]


def _b8_throughput(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    phases = _b8_phases(bench)
    if not phases:
        return None
    tuning = _settings(bench["B8"].get("debezium", {}).get("connector_tuning"))
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for i, (_label, ours, theirs) in enumerate(phases):
        bridge, debezium = ours["events_per_s"], theirs["events_per_s"]
        _pair(axis, i, (bridge, debezium), (BRIDGE, DEBEZIUM), ("bridge", f"Debezium{tuning}"))
        if debezium:
            axis.annotate(f"bridge / Debezium {bridge / debezium:.2f}x", (i, max(bridge, debezium) * 1.07),
                          ha="center", va="bottom", fontsize=8, fontweight="bold")
    axis.set_ylim(top=max(max(o["events_per_s"], d["events_per_s"]) for _, o, d in phases) * 1.35)
    axis.set_xticks(range(len(phases)), [p[0] for p in phases])
    axis.set_ylabel("events/s (512-byte payloads)")
    axis.set_title(f"B8: bridge vs Debezium, {bench['B8']['events_per_phase']:,} events per phase, same run")
    axis.legend(fontsize=8, loc="upper left")
    return figure


def _b8_cpu(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    phases = [p for p in _b8_phases(bench) if "relay_cpu_s_per_100k" in p[1] and "relay_cpu_s_per_100k" in p[2]]
    if not phases:
        return None
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for i, (_label, ours, theirs) in enumerate(phases):
        bars = ((i - 0.2, ours["relay_cpu_s_per_100k"], database_cpu(ours) or 0.0, BRIDGE, "bridge process",
                 "bridge: its PostgreSQL backends"),
                (i + 0.2, theirs["relay_cpu_s_per_100k"], database_cpu(theirs) or 0.0, DEBEZIUM,
                 "Debezium: Connect worker JVM", "Debezium: PostgreSQL walsender"))
        for x, relay, database, color, relay_label, database_label in bars:
            axis.bar(x, relay, 0.4, color=color, label=relay_label if i == 0 else None)
            if database:
                axis.bar(x, database, 0.4, bottom=relay, color=color, alpha=0.45, hatch="//",
                         label=database_label if i == 0 else None)
            axis.annotate(f"{relay + database:.2f}" + (f"\n({relay:.2f} + {database:.2f})" if database else ""),
                          (x, relay + database), ha="center", va="bottom", fontsize=8)
    axis.set_ylim(top=max(side["relay_cpu_s_per_100k"] + (database_cpu(side) or 0.0)
                          for _, o, d in phases for side in (o, d)) * 1.45)
    axis.set_xticks(range(len(phases)), [p[0] for p in phases])
    axis.set_ylabel("CPU seconds (user + system) per 100,000 events")
    axis.set_title("B8: relay CPU per 100,000 events, bridge vs Debezium, same run")
    axis.legend(fontsize=8, loc="upper left")
    return figure


def _b8_latency(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    rows: dict[str, Any] = bench.get("B8-rows") or {}
    latency = rows.get("rows", {}).get("latency") if _ok(rows) else None
    if not latency:
        return None
    dbz, ours = latency.get("debezium", {}), latency.get("bridge", {})
    dbz, ours = (dbz if _ok(dbz) else {}), (ours if _ok(ours) else {})

    def settings(relay: dict[str, Any], variant: str) -> str:
        measured = [r[variant] for r in relay.values() if _ok(r.get(variant))]
        return _settings(measured[0].get("settings")) if measured else ""

    series = ((f"Debezium, defaults{settings(dbz, 'default')}", dbz, "default", CEILING, "//"),
              (f"Debezium, tuned{settings(dbz, 'tuned')}", dbz, "tuned", DEBEZIUM, None),
              ("bridge, defaults", ours, "default", BRIDGE, None))
    groups = [(rate, key) for rate in sorted(set(dbz) | set(ours), key=int) for key in ("p50", "p99")]
    figure, axis = plt.subplots(figsize=(9, 4.5))
    width, labelled = 0.8 / len(series), set()
    for j, (label, relay, variant, colour, hatch) in enumerate(series):
        for i, (rate, key) in enumerate(groups):
            outcome = relay.get(rate, {}).get(variant)
            value = outcome.get("latency_ms", {}).get(key) if _ok(outcome) else None
            if value is None:
                continue
            x = i + (j - (len(series) - 1) / 2) * width
            axis.bar(x, max(value, 0.1), width, color=colour, hatch=hatch, label=None if label in labelled else label)
            labelled.add(label)
            axis.annotate(f"{value:,.1f}" if value < 100 else f"{value:,.0f}", (x, max(value, 0.1)), ha="center",
                          va="bottom", fontsize=7)
    if not labelled:
        plt.close(figure)
        return None
    axis.set_yscale("log")
    axis.set_ylim(top=axis.get_ylim()[1] * 8)  # room for the legend above the tallest bar
    axis.set_xticks(range(len(groups)), [f"{int(rate):,}/s offered\n{key}" for rate, key in groups])
    axis.set_ylabel("commit to LogAppendTime (ms, log scale)")
    axis.set_title("B8: commit-to-ack latency, bridge vs Debezium, same run")
    axis.legend(fontsize=8, loc="upper center", ncol=3)
    return figure


def _b8_counts(outcomes: dict[str, Any], rows: tuple[str, ...], field: str) -> dict[str, float] | None:
    """Relay -> `field` summed over `rows`; None unless both relays measured it in every one of them."""
    counts = {}
    for relay in ("debezium", "bridge"):
        measured = [outcomes.get(row, {}).get(relay) for row in rows]
        if not all(_ok(m) and field in m for m in measured):
            return None
        counts[relay] = sum(m[field] for m in measured)
    return counts


def _b8_crash(bench: dict[str, Any], _: dict[str, Any]) -> Any:
    rows: dict[str, Any] = bench.get("B8-rows") or {}
    outcomes = rows.get("rows", {}) if _ok(rows) else {}
    crashes = outcomes.get("crash", {}).get("bridge", {}).get("crashes", "the")
    wanted = [
        ("duplicates per kill -9\n(mean over the kills)", "records sent twice",
         [(f"crash row,\n{crashes} kills", _b8_counts(outcomes, ("crash",), "duplicates_per_crash"))]),
        ("per-aggregate order inversions", "records with a seq below an earlier one's",
         [(row, _b8_counts(outcomes, (row,), "inversions")) for row in ("order", "rollbacks")]),
        ("lost and leaked", "events",
         [("committed, lost\n(all rows)", _b8_counts(outcomes, ("order", "rollbacks", "crash"), "lost")),
          ("rolled back,\npublished", _b8_counts(outcomes, ("rollbacks",), "leaked"))]),
    ]
    panels = [(title, unit, measured) for title, unit, bars in wanted
              if (measured := [(label, c) for label, c in bars if c is not None])]
    if not panels:
        return None
    figure, axes = plt.subplots(1, len(panels), figsize=(9, 4.5), squeeze=False,
                                gridspec_kw={"width_ratios": [len(bars) + 0.5 for _, _, bars in panels]})
    for axis, (title, unit, bars) in zip(axes[0], panels, strict=True):
        for i, (_label, counts) in enumerate(bars):
            for j, (relay, colour) in enumerate((("debezium", DEBEZIUM), ("bridge", BRIDGE))):
                x, value = i + (j - 0.5) * 0.4, counts[relay]
                axis.bar(x, value, 0.4, color=colour)
                axis.annotate(f"{value:,.0f}", (x, value), ha="center", va="bottom", fontsize=8)
        axis.set_ylim(0, max(max(max(c.values()) for _, c in bars), 1) * 1.15)
        axis.set_xlim(-0.6, len(bars) - 0.4)
        axis.set_xticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
        axis.set_ylabel(unit)
        axis.set_title(title, fontsize=9)
    figure.legend(handles=[Patch(color=DEBEZIUM, label="Debezium"), Patch(color=BRIDGE, label="bridge")],
                  fontsize=8, loc="upper right")
    figure.suptitle("B8: crash and order costs, bridge vs Debezium, same run")
    figure.tight_layout()
    return figure
