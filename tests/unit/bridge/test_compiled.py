"""Which code the tests run: the per-event core as Python in a checkout, compiled in `make test-compiled`'s copy.

A compiled module beside its source shadows it (Python imports the extension first), so one left in a checkout
(by an older `ops/compile_core.py --in-place`, or an editable install that compiled) would run instead of any later
edit of the source. `make test-compiled` sets BRIDGE_EXPECT_COMPILED=1 in its copy with the wheel's compiled
modules, so its run proves it tested the compiled modules, not the sources beside them.
"""

from __future__ import annotations

import os

from bridge.compiled import MODULES, compiled_modules


def test_the_core_runs_compiled_exactly_where_it_is_meant_to() -> None:
    if os.environ.get("BRIDGE_EXPECT_COMPILED") == "1":
        assert compiled_modules() == list(MODULES), "make test-compiled ran the sources, not the compiled modules"
    else:
        assert compiled_modules() == [], (
            "compiled modules shadow their sources in this checkout, so edits to them would not run; "
            "remove them with `python ops/compile_core.py --clean`"
        )
