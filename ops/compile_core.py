"""A copy of the checkout whose per-event core (`bridge.compiled.MODULES`) runs compiled, from the wheel.

    python ops/compile_core.py OUT_DIR [--wheel WHEEL]   # the packages and tests copied into OUT_DIR, with the
                                                         # compiled modules of WHEEL beside their sources; run
                                                         # pytest there (`make test-compiled` runs the unit tests)
    python ops/compile_core.py --clean                   # remove compiled modules left in this checkout

The compiling itself is the wheel's (ops/packaging/compiled_wheel.py): without --wheel this builds one with
`python -m build` (which needs a C compiler), so the tests run the very extension modules that ship. To run the
compiled bridge, install the wheel (`pip install dist/outbox_bridge-*.whl`, or `pip install .`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.compiled import MODULES  # noqa: E402

#: The file that marks a directory as a compiled copy this script made (and may replace).
_MARKER = ".compiled-core"
#: What a compiled copy holds: the packages, the tests with their settings (pytest's in pyproject.toml) and the
#: files the unit tests read (compose file, ops, docs, the benchmarks' report, the packaging and image files).
_COPIED = ("bridge", "projections", "migrations", "tests", "pyproject.toml", "setup.py", "MANIFEST.in", "ops", "docs",
           "bench", "docker-compose.yml", ".dockerignore", "README.md", "Makefile")


def build_wheel(into: Path) -> Path:
    """Build the sdist and, from it, the wheel with the compiled core (OUTBOX_COMPILE_CORE=1) into `into`."""
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(into), str(ROOT)],
                            env={**os.environ, "OUTBOX_COMPILE_CORE": "1"}, capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise SystemExit(f"building the wheel failed (exit {result.returncode}):\n{result.stdout[-3000:]}\n"
                         f"{result.stderr[-3000:]}")
    return next(into.glob("*.whl"))


def extract_compiled(wheel: Path, into: Path) -> list[str]:
    """Copy the wheel's extension modules into the tree at `into`, beside the sources; return their paths, or
    exit when the wheel lacks one of MODULES (a pure-Python wheel)."""
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if name.endswith(tuple(EXTENSION_SUFFIXES))]
        missing = [m for m in MODULES if not any(n.startswith(m.replace(".", "/") + ".") for n in members)]
        if missing:
            raise SystemExit(f"{wheel.name} has no compiled {', '.join(missing)}: a pure-Python wheel? Build it "
                             "where a C compiler is, with OUTBOX_COMPILE_CORE=1 to fail rather than fall back")
        for name in members:
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))
    return members


def clean(base: Path) -> int:
    removed = 0
    for path in [*base.glob("*__mypyc*.so"), *(base / "bridge").glob("*__mypyc*.so"),
                 *(p for m in MODULES for p in _extensions(base, m))]:
        path.unlink()
        removed += 1
    return removed


def _extensions(base: Path, module: str) -> list[Path]:
    parts = module.split(".")
    return list((base / Path(*parts[:-1])).glob(f"{parts[-1]}.*.so"))


def copy_checkout(base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    (base / _MARKER).write_text("a compiled copy made by ops/compile_core.py; replaced by its next run\n")
    for name in _COPIED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, base / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(ROOT / name, base / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("out_dir", nargs="?", type=Path, help="make a compiled copy of the checkout here (replaced)")
    where.add_argument("--clean", action="store_true", help="remove compiled modules from this checkout")
    parser.add_argument("--wheel", type=Path, help="take the compiled modules from this wheel (default: build one)")
    args = parser.parse_args(argv)
    if args.clean:
        print(f"removed {clean(ROOT)} compiled file(s) from {ROOT}")
        return 0
    started = time.monotonic()
    base = args.out_dir.resolve()
    if base == ROOT or base in ROOT.parents:
        parser.error(f"OUT_DIR {args.out_dir} holds this checkout; name a directory of its own, e.g. .run/compiled")
    if base.exists() and any(base.iterdir()) and not (base / _MARKER).exists():
        parser.error(f"OUT_DIR {args.out_dir} is not empty and not a compiled copy made before; it would be "
                     "replaced, so name an empty or new directory")
    copy_checkout(base)
    if args.wheel is not None:
        extracted = extract_compiled(args.wheel, base)
        wheel_name = args.wheel.name
    else:
        with tempfile.TemporaryDirectory(prefix="compile-core-") as scratch:
            wheel = build_wheel(Path(scratch))
            extracted = extract_compiled(wheel, base)
            wheel_name = wheel.name
    print(summary(extracted, wheel_name, base, time.monotonic() - started))
    return 0


def summary(extracted: list[str], wheel_name: str, base: Path, seconds: float) -> str:
    """The line that says what the copy runs compiled: MODULES, which extract_compiled found in the wheel, and the
    extension files it copied, which are more (mypyc's shared runtime library is one of them)."""
    shared = len(extracted) - len(MODULES)
    return (f"{len(MODULES)} compiled modules of {wheel_name} in {base} ({seconds:.0f} s; {len(extracted)} "
            f"extension files, {shared} of them shared by the modules): " + ", ".join(MODULES))


if __name__ == "__main__":
    raise SystemExit(main())
