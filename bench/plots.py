"""The report's plots (PNG, matplotlib's Agg backend), drawn from the stored results and samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

BRIDGE, CEILING, TARGET = "#1f77b4", "#bbbbbb", "#d62728"


def draw(results: dict[str, Any], samples: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Draw every plot the results allow; return name -> path of the PNGs written."""
    bench = results.get("benchmarks", {})
    images: dict[str, Path] = {}
    for name, painter in (("throughput", _throughput), ("tuning", _tuning), ("b1_timeline", _timeline),
                          ("latency", _latency), ("crash", _crash), ("projection", _projection),
                          ("end_to_end", _end_to_end), ("rss", _rss)):
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
        axis.bar(i - 0.2, bridge, 0.4, color=BRIDGE, label="bridge" if i == 0 else None)
        axis.bar(i + 0.2, ceiling, 0.4, color=CEILING, label="ceiling (bare producer)" if i == 0 else None)
        axis.hlines(0.8 * ceiling, i - 0.4, i + 0.4, colors=TARGET, linestyles="dashed",
                    label="target: 80% of ceiling" if i == 0 else None)
        axis.annotate(f"{bridge:,.0f}\n({variant['fraction_of_ceiling']:.0%})", (i - 0.2, bridge), ha="center",
                      va="bottom", fontsize=8)
        axis.annotate(f"{ceiling:,.0f}", (i + 0.2, ceiling), ha="center", va="bottom", fontsize=8)
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
    axis.axhline(20, color=TARGET, linestyle="dashed", label="target p99 at 1,000/s: 20 ms")
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
        ours, base = row["projection"]["events_per_s"], row["baseline"]["events_per_s"]
        axis.bar(i - 0.2, ours, 0.4, color=BRIDGE, label="projection" if i == 0 else None)
        axis.bar(i + 0.2, base, 0.4, color=CEILING, label="bare MERGE baseline" if i == 0 else None)
        axis.annotate(f"{ours:,.0f}", (i - 0.2, ours), ha="center", va="bottom", fontsize=8)
        axis.annotate(f"{base:,.0f}", (i + 0.2, base), ha="center", va="bottom", fontsize=8)
    axis.axhline(50_000, color=TARGET, linestyle="dashed", label="target 50,000/s")
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
    axis.axhline(2, color=TARGET, linestyle="dotted", label="target p50 2 s")
    axis.axhline(5, color=TARGET, linestyle="dashed", label="target p99 5 s")
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
    axis.axhline(150, color=TARGET, linestyle="dashed", label="target 150 MB")
    axis.set_xlabel("seconds since the bridge process started")
    axis.set_ylabel("RSS (MB)")
    axis.set_ylim(bottom=0)
    axis.set_title("B7: bridge resident memory while draining a backlog")
    axis.legend(fontsize=8)
    return figure
