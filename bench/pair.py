"""Paired drains: is this checkout's bridge faster than another commit's, on one backlog, on this machine?

`python -m bench.pair --base REV [--db sqlite|postgresql] [--events N] [--rounds R] [--set NAME=VALUE ...]`

A single drain on a shared two-core machine moves by 15% from one run to the next, more than most levers give, so
a lever is judged in pairs: both bridges drain the same backlog in every round, one right after the other, the
order reversed every other round, each under a fresh bridge name (watermark 0) onto a fresh topic, exactly as B1
and B2 drain theirs (`bench.backlog.drain`). Each side is the wheel built from its source and installed into its
own virtualenv (`bench.installed`): the checkout as it is, uncommitted changes included, and `--base` from a
worktree of that commit. `--set` passes a bridge setting (`BRIDGE_...`) to both. The stack must be up (`make up`).

Prints each round and, at the end, each side's median and the paired differences (this checkout minus the base):
their median, range and how many rounds this checkout was ahead. Results go to
`bench/results/raw/<run>/pair.json`; nothing is published.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import bridge_process
from bench.b1_throughput import KEYS
from bench.backlog import Target, drain, warm_cluster
from bench.bridge_process import RUN_QUEUE
from bench.context import FULL, Context
from bench.installed import ROOT, Installation, install
from bench.run import RESULTS
from bench.stack import KAFKA1, Scratch, ensure_stack, pg_dsn
from bench.workload import Workload, load_postgres, load_sqlite

log = logging.getLogger("bench.pair")

SIDES = ("base", "head")


def paired(base: list[float], head: list[float]) -> dict[str, Any]:
    """The medians of both sides and their paired differences (head minus base, round by round)."""
    if len(base) != len(head) or not base:
        raise ValueError(f"paired rounds need as many rates on each side, got {len(base)} and {len(head)}")
    differences = [h - b for b, h in zip(base, head, strict=True)]
    return {
        "base_median": statistics.median(base),
        "head_median": statistics.median(head),
        "difference_median": statistics.median(differences),
        "difference_range": [min(differences), max(differences)],
        "relative_median": statistics.median(h / b - 1 for b, h in zip(base, head, strict=True)),
        "head_ahead": sum(d > 0 for d in differences),
        "rounds": len(differences),
    }


def order(round_index: int) -> tuple[str, ...]:
    """Which side drains first in a round: base first in even rounds, head first in odd ones."""
    return SIDES if round_index % 2 == 0 else SIDES[::-1]


def parse_settings(pairs: list[str]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.startswith("BRIDGE_"):
            raise SystemExit(f"--set {pair!r}: give a bridge setting as BRIDGE_NAME=value, e.g. BRIDGE_LINGER_MS=0")
        settings[name] = value
    return settings


def resolve(rev: str) -> str:
    """The commit `rev` names in this repository, or a clear refusal."""
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                           capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise SystemExit(f"--base {rev!r} names no commit of this repository; give a commit, branch or tag "
                         "(e.g. main or HEAD~1)")
    return found.stdout.strip()


def _worktree(commit: str, stack: ExitStack) -> Path:
    """A detached worktree of `commit`, removed when the stack closes."""
    folder = Path(tempfile.mkdtemp(prefix="outbox-pair-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), commit], check=True,
                   capture_output=True, text=True)
    stack.callback(subprocess.run, ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)],
                   check=False, capture_output=True)
    return folder


def _backlog(ctx: Context, db: str, events: int) -> str:
    workload = Workload(keys=KEYS)
    if db == "sqlite":
        url = ctx.scratch.sqlite(ctx.raw_dir, "pair")
        seconds = load_sqlite(url.removeprefix("sqlite:///"), workload, events)
    else:
        url = ctx.scratch.database("pair")
        seconds = load_postgres(pg_dsn(url.rsplit("/", 1)[1]), workload, events)
    log.info("loaded %d events into %s in %.1f s", events, db, seconds)
    return url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare this checkout with (e.g. HEAD~1, main)")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite",
                        help="the backlog's database (default sqlite, B2's; postgresql is B1's)")
    parser.add_argument("--events", type=int, default=500_000, help="events in the backlog, drained in full each time")
    parser.add_argument("--rounds", type=int, default=6, help="rounds; each drains both sides once (default 6)")
    parser.add_argument("--set", action="append", default=[], metavar="BRIDGE_NAME=VALUE",
                        help="a bridge setting for both sides (repeatable)")
    args = parser.parse_args(argv)
    if args.events < 10_000 or args.rounds < 2:
        raise SystemExit("--events must be at least 10000 and --rounds at least 2: shorter drains say nothing")
    settings = parse_settings(args.set)
    base = resolve(args.base)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    run_id = datetime.now(UTC).strftime("p%m%d%H%M%S")
    raw_dir = RESULTS / "raw" / run_id
    raw_dir.mkdir(parents=True, exist_ok=True)
    ensure_stack()
    ctx = Context(run_id=run_id, quick=False, sizes=FULL, raw_dir=raw_dir, scratch=Scratch(run_id), shared={})
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    with ExitStack() as stack:
        sources = {"base": _worktree(base, stack), "head": ROOT}
        installed: dict[str, Installation] = {}
        for side in SIDES:
            installed[side] = install(raw_dir / f"dist-{side}", sources[side])
            stack.callback(installed[side].remove)
        stack.callback(ctx.scratch.cleanup)
        target = Target(_backlog(ctx, args.db, args.events), KAFKA1, 1, KEYS)
        warm = warm_cluster(ctx, "pair", target, args.events)
        log.info("the cluster warmed in %.0f s: %s events/s", warm["seconds"], warm["rates"])
        for index in range(args.rounds):
            for side in order(index):
                bridge_process.INSTALLED = installed[side]
                result = drain(ctx, f"pair{index + 1}-{side}", target, args.events, settings)
                rates[side].append(result.events_per_s)
                log.info("round %d %s: %.0f events/s (main thread %.0f%% busy, %.0f%% waiting for a core)", index + 1,
                         side, result.events_per_s, 100 * result.thread_cpu.get("main", 0.0),
                         100 * result.thread_cpu.get(RUN_QUEUE, 0.0))
        bridge_process.INSTALLED = None
    verdict = paired(rates["base"], rates["head"])
    stored = {"base": args.base, "base_commit": base, "db": args.db, "events": args.events, "settings": settings,
              "rates": rates, **verdict}
    (raw_dir / "pair.json").write_text(json.dumps(stored, indent=2))
    print(f"base {args.base}: median {verdict['base_median']:,.0f} events/s; this checkout: median "
          f"{verdict['head_median']:,.0f}; paired difference median {verdict['difference_median']:+,.0f} "
          f"({verdict['relative_median']:+.1%}), from {verdict['difference_range'][0]:+,.0f} to "
          f"{verdict['difference_range'][1]:+,.0f}; ahead in {verdict['head_ahead']} of {verdict['rounds']} rounds "
          f"({raw_dir / 'pair.json'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
