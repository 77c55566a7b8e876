"""Reading a py-spy profile (raw collapsed stacks): where the bridge's interpreter spends its time."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

# py-spy frames look like "function (path/file.py:line)".
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)$")


def _frame(frame: str, with_line: bool) -> str:
    match = _FRAME.match(frame)
    if match is None:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/lib/python3.11/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    line = f":{match['line']}" if with_line and match["line"] else ""
    return f"{match['func']} ({path}{line})"


def summarize(path: Path, top: int = 20) -> dict[str, Any]:
    """Top lines by self time and functions by inclusive time, as fractions of all samples."""
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_time[_frame(frames[-1], with_line=True)] += count
        for name in {_frame(f, with_line=False) for f in frames}:
            inclusive[name] += count
    if total == 0:
        return {"samples": 0, "self": [], "inclusive": []}
    return {
        "samples": total,
        "self": [{"function": f, "share": round(n / total, 4)} for f, n in self_time.most_common(top)],
        "inclusive": [{"function": f, "share": round(n / total, 4)} for f, n in inclusive.most_common(top * 2)],
    }
