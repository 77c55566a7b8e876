"""What every section of the report writes the same way: numbers, verdicts, a benchmark that did not run,
and links to the plots."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MET, MISSED = "met", "**MISSED**"
DASH = "\u2013"  # an en dash: "nothing here" in a table cell


def num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return DASH
    return f"{value:,.{digits}f}"


def verdict(ok: bool | None) -> str:
    return DASH if ok is None else (MET if ok else MISSED)


def share(fraction: float) -> str:
    """A share that stands beside a verdict on it, to a tenth of a per cent: 0.397 against a goal of 40% reads
    39.7%, where a whole per cent would say 40% beside MISSED."""
    return f"{fraction:.1%}"


def problem(entry: dict[str, Any] | None) -> str | None:
    """Why a benchmark (or a part of one) has no numbers: not run, failed or skipped; None when it has them."""
    if entry is None:
        return "not run"
    if "error" in entry:
        return f"failed: {entry['error'].splitlines()[0]}"
    if "skipped" in entry:
        return f"skipped: {entry['skipped']}"
    return None


def problem_row(label: str, what: str, why: str, target: str, outcome: str = MISSED) -> str:
    """The summary's row for a benchmark without numbers."""
    return f"| {label} | {what} | {why} | | {target} | {outcome} |"


def problem_section(title: str, why: str) -> str:
    """A section whose benchmark has no numbers: its title and why."""
    return f"## {title}\n\n{why}\n"


@dataclass(frozen=True)
class Plots:
    """The plots drawn for this run (name -> PNG), linked relative to the report's folder `base`."""

    images: Mapping[str, Path]
    base: Path

    def link(self, name: str, alt: str) -> str:
        """The plot as a Markdown image on its own line; nothing when it was not drawn."""
        if name not in self.images:
            return ""
        return f"\n![{alt}]({os.path.relpath(self.images[name], self.base)})\n"
