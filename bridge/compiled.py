"""The bridge's per-event core, which the wheel carries compiled with mypyc, and which of it this process runs
compiled.

These modules run once or more for every event: building the record (`records`, with the JSON check of its payload,
`json_text`; `cloudevents` in that record format), the poison gate around it (`daemon.poison`), the tracker that
moves the watermark (`watermark`, `holes`, `refusals`), and the records in flight with their delivery reports
(`daemon.in_flight`). Compiled, the bridge drained a backlog 5 to 24% faster in most rounds on the benchmark machine
(`docs/BENCHMARKS.md`, B1); `daemon.in_flight` added 3% on a SQLite backlog (16 paired drains, `bench/analysis.md`).
The build backend (ops/packaging/compiled_wheel.py) compiles them into every wheel built where a C compiler is, so an
installed bridge runs them compiled; a checkout or an editable install runs them as Python, and `make test` runs the
unit tests on both.
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from typing import Final

MODULES: Final = (
    "bridge.core.records",
    "bridge.core.cloudevents",
    "bridge.core.json_text",
    "bridge.core.watermark",
    "bridge.core.holes",
    "bridge.core.refusals",
    "bridge.daemon.poison",
    "bridge.daemon.in_flight",
)


def compiled_modules() -> list[str]:
    """Which of `MODULES` this process imported as compiled extension modules."""
    return [
        name for name in MODULES if str(importlib.import_module(name).__file__).endswith(tuple(EXTENSION_SUFFIXES))
    ]
