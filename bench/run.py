"""`python -m bench.run [--only B1,B3] [--quick]`: run the benchmarks, store the results, write the report.

A full run writes `bench/results/latest.json`, the plots beside it and `docs/BENCHMARKS.md`; `--only`
replaces just those benchmarks' entries in the stored results. `--quick` is a smoke run with small
sizes: its results and plots go under `bench/results/raw/<run>/` and the published report is left alone.
Raw samples, bridge logs and profiles always go under `bench/results/raw/<run>/` (not committed).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import bridge_process
from bench.context import FULL, QUICK, Context
from bench.machine import machine, settings, versions
from bench.stack import ROOT, Scratch, ensure_stack

log = logging.getLogger("bench")

RESULTS = ROOT / "bench" / "results"
REPORT = ROOT / "docs" / "BENCHMARKS.md"

# id -> module; order is the order they run in (B7 reuses B1's 1M-event RSS samples).
BENCHMARKS: dict[str, str] = {
    "B1": "bench.b1_throughput",
    "B1-tuning": "bench.b1_tuning",
    "B1-tracing": "bench.b1_tracing",
    "B1-formats": "bench.b1_value_format",
    "B1-delivery": "bench.b1_delivery",
    "B7": "bench.b7_memory",
    "B2": "bench.b2_sqlite",
    "B3": "bench.b3_latency",
    "B3-tuning": "bench.b3_tuning",
    "B3-delivery": "bench.b3_delivery",
    "B4": "bench.b4_crash",
    "B5": "bench.b5_projection",
    "B6": "bench.b6_end_to_end",
    "B8": "bench.b8_debezium",
    "B8-rows": "bench.b8_rows",
}


def _select(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    wanted = [name.strip().upper() for name in only.split(",") if name.strip()]
    chosen = [b for b in BENCHMARKS if b.upper() in wanted or b.split("-")[0] in wanted]
    unknown = [w for w in wanted if not any(b.upper() == w or b.split("-")[0] == w for b in BENCHMARKS)]
    if unknown:
        raise SystemExit(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    return chosen


def _thin(series: Any, most: int = 600) -> Any:
    """Every n-th point of a long time series (keeping the last), so the stored samples stay small."""
    if isinstance(series, dict):
        return {key: _thin(value, most) for key, value in series.items()}
    if isinstance(series, list) and len(series) > most:
        step = -(-len(series) // most)
        return [*series[::step], series[-1]]
    return series


def _split_samples(value: Any, samples: dict[str, Any], path: str = "") -> Any:
    """Move the bulky `_...` entries (time series) out of a result into `samples`, keyed by path."""
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            where = f"{path}/{key}" if path else key
            if key.startswith("_"):
                samples[where] = _thin(item)
            else:
                kept[key] = _split_samples(item, samples, where)
        return kept
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run of a couple of minutes")
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases and topics (debugging)")
    parser.add_argument("--report", action="store_true",
                        help="only redraw the plots and rewrite docs/BENCHMARKS.md from the stored results")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    if args.report:
        rewrite_report()
        return 0
    logging.getLogger("py4j").setLevel(logging.WARNING)
    selected = _select(args.only)
    run_id = datetime.now(UTC).strftime("r%m%d%H%M%S")
    raw_dir = RESULTS / "raw" / run_id
    raw_dir.mkdir(parents=True, exist_ok=True)
    ensure_stack()
    ctx = Context(run_id=run_id, quick=args.quick, sizes=QUICK if args.quick else FULL, raw_dir=raw_dir,
                  scratch=Scratch(run_id), shared={})
    core = install_bridge(raw_dir / "dist")
    started = datetime.now(UTC)
    header = {"run_id": run_id, "mode": "quick" if args.quick else "full", "started_at": started.isoformat(),
              "machine": machine(), "versions": versions(), "settings": settings(), "sizes": ctx.sizes.as_dict()}
    log.info("run %s (%s): %s", run_id, header["mode"], ", ".join(selected))
    results: dict[str, Any] = {}
    samples: dict[str, Any] = {}
    try:
        for name in selected:
            log.info("=== %s", name)
            began = time.monotonic()
            load_before = machine()["load_average"][0]
            try:
                outcome = importlib.import_module(BENCHMARKS[name]).run(ctx)
            except Exception as exc:  # noqa: BLE001 - one failed benchmark is reported, the others still run
                log.error("%s failed: %s", name, exc)
                outcome = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            outcome["seconds"] = round(time.monotonic() - began, 1)
            # 1-minute load average before and after: how much else was running on the 2 cores.
            outcome["load_average_1m"] = [load_before, machine()["load_average"][0]]
            outcome["run_id"] = run_id
            outcome["bridge_core"] = core
            results[name] = _split_samples(outcome, samples, name)
            log.info("=== %s done in %.0fs", name, outcome["seconds"])
    finally:
        if bridge_process.INSTALLED is not None:
            bridge_process.INSTALLED.remove()
        if "spark" in ctx.shared:
            from bench.spark_jobs import stop_session

            stop_session(ctx)
        if not args.keep:
            try:
                ctx.scratch.cleanup()
            except Exception as exc:  # noqa: BLE001 - the results are worth keeping even if cleanup fails
                log.error("cleanup failed (remove bench_%s_* databases and bench.%s.* topics by hand): %s",
                          run_id, run_id, exc)
    header["finished_at"] = datetime.now(UTC).isoformat()
    header["load_average_end"] = machine()["load_average"]
    (raw_dir / "samples.json").write_text(json.dumps(samples))
    (raw_dir / "results.json").write_text(json.dumps({**header, "benchmarks": results}, indent=2))
    publish(header, results, samples, raw_dir, quick=args.quick)
    failed = [name for name, outcome in results.items() if "error" in outcome]
    if failed:
        log.error("failed: %s (see %s)", ", ".join(failed), raw_dir / "results.json")
    return 1 if failed else 0


def install_bridge(dist_dir: Path) -> str:
    """Build the wheel and install it into a fresh virtualenv (`bench.installed`) for this run's bridge processes
    (`bench.bridge_process.INSTALLED`); return how the bridge runs its core, as the report says it. If that fails,
    the run measures the checkout's sources and says so."""
    from bench import bridge_process
    from bench.installed import install
    from bridge.compiled import MODULES

    try:
        installed = install(dist_dir)
    except (RuntimeError, OSError, ValueError) as exc:
        log.error("installing the wheel failed; the bridge runs from the checkout, its core as plain Python: %s", exc)
        return "plain Python, from the checkout (building or installing the wheel failed)"
    bridge_process.INSTALLED = installed
    return installed.describe(len(MODULES))


def rewrite_report() -> None:
    """Plots and report from `bench/results/latest.json` and `samples.json`, without measuring anything."""
    from bench import plots, report

    latest = json.loads((RESULTS / "latest.json").read_text())
    samples_path = RESULTS / "samples.json"
    samples = json.loads(samples_path.read_text()) if samples_path.exists() else {}
    REPORT.write_text(report.render(latest, plots.draw(latest, samples, RESULTS), REPORT.parent))
    log.info("report rewritten: %s", REPORT)


def publish(header: dict[str, Any], results: dict[str, Any], samples: dict[str, Any], raw_dir: Path,
            quick: bool) -> None:
    """Merge into latest.json, draw the plots and write the report (into raw_dir only for --quick)."""
    from bench import plots, report

    out_dir = raw_dir if quick else RESULTS
    latest_path = out_dir / "latest.json"
    samples_path = out_dir / "samples.json"
    latest: dict[str, Any] = {"benchmarks": {}}
    stored_samples: dict[str, Any] = {}
    if not quick and latest_path.exists():
        latest = json.loads(latest_path.read_text())
        if samples_path.exists():
            stored_samples = json.loads(samples_path.read_text())
    benchmarks = {**latest.get("benchmarks", {}), **results}
    for name in results:  # drop stale samples of the benchmarks just re-run
        stored_samples = {k: v for k, v in stored_samples.items() if not k.startswith(f"{name}/")}
    stored_samples.update(samples)
    merged = {**header, "benchmarks": {name: benchmarks[name] for name in BENCHMARKS if name in benchmarks}}
    if latest.get("run_id") and latest["run_id"] != header["run_id"] and len(results) < len(BENCHMARKS):
        merged["merged_from"] = sorted({b.get("run_id", "?") for b in merged["benchmarks"].values()})
    latest_path.write_text(json.dumps(merged, indent=2) + "\n")
    samples_path.write_text(json.dumps(stored_samples) + "\n")
    images = plots.draw(merged, stored_samples, out_dir)
    report_path = raw_dir / "BENCHMARKS.md" if quick else REPORT
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(report.render(merged, images, report_path.parent))
    log.info("results in %s, report in %s", latest_path, report_path)


if __name__ == "__main__":
    sys.exit(main())
