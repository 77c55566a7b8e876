"""ops/compile_core.py makes the compiled copy `make test-compiled` runs; its last line says what that copy runs
compiled. A wheel holds one extension file per module of `bridge.compiled.MODULES` and mypyc's shared runtime
library besides, so counting the files overstates the modules by one."""

from __future__ import annotations

import sys
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from bridge.compiled import MODULES

ROOT = Path(__file__).resolve().parents[3]


def _wheel_like_mypycs(into: Path) -> Path:
    """A wheel with what a compiled one holds where it matters here: each module's extension file beside its
    source, and the shared runtime inside `bridge` (ops/packaging/compiled_wheel.py puts it there)."""
    suffix = EXTENSION_SUFFIXES[0]
    wheel = into / "outbox_bridge-0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for module in MODULES:
            archive.writestr(module.replace(".", "/") + suffix, b"not really compiled")
        archive.writestr("bridge/_compiled__mypyc" + suffix, b"the shared runtime")
        archive.writestr("bridge/__init__.py", "")
    return wheel


def test_the_summary_counts_the_compiled_modules_not_the_extension_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "ops"))
    import compile_core

    try:
        wheel = _wheel_like_mypycs(tmp_path)
        out = tmp_path / "compiled"
        assert compile_core.main([str(out), "--wheel", str(wheel)]) == 0
    finally:
        sys.modules.pop("compile_core", None)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f"{len(MODULES)} compiled modules of {wheel.name} in {out} ")
    assert f"{len(MODULES) + 1} extension files, 1 of them shared by the modules" in line
    assert line.endswith(": " + ", ".join(MODULES))
    assert all((out / (m.replace(".", "/") + EXTENSION_SUFFIXES[0])).is_file() for m in MODULES)
