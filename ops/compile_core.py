"""Compile the bridge's per-event core (`bridge.compiled.MODULES`) with mypyc.

    python ops/compile_core.py OUT_DIR      # a copy of the packages and tests in OUT_DIR, the core compiled; put
                                            # OUT_DIR first on PYTHONPATH to run it (the benchmarks do), or run
                                            # pytest there (`make test` runs the unit tests so)
    python ops/compile_core.py --in-place   # compile beside the sources (an image or a deployed checkout)

Needs mypy (the `dev` extra) and a C compiler. In place, the compiled modules shadow their .py files: run it
again after changing one, or delete the `*.so` files beside them (`--clean`).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.compiled import MODULES  # noqa: E402

#: The file that marks a directory as a compiled copy this script made (and may replace).
_MARKER = ".compiled-core"
#: What a compiled copy holds: the packages, the tests with their settings (pytest's in pyproject.toml) and the
#: files the unit tests read (compose file, ops, docs).
_COPIED = ("bridge", "projections", "migrations", "tests", "pyproject.toml", "ops", "docs", "docker-compose.yml",
           "README.md", "Makefile")
# mypy's settings for the build: the project's own (strict) checks run in `make lint`; here only what mypyc needs.
_MYPY_INI = "[mypy]\npython_version = 3.11\nignore_missing_imports = True\n"
_SETUP = (
    "import sys\n"
    "from setuptools import setup\n"
    "from mypyc.build import mypycify\n"
    "setup(name='outbox-bridge-core', ext_modules=mypycify(sys.argv[1:], opt_level='3'),\n"
    "      script_args=['build_ext', '--inplace'])\n"
)


def sources() -> list[str]:
    """The source files of MODULES, relative to the tree that holds bridge/."""
    return [str(Path(*name.split(".")).with_suffix(".py")) for name in MODULES]


def compile_core(into: Path) -> None:
    """Compile MODULES from this checkout's sources and put the extension modules into the tree at `into`, beside
    the sources (the shared library mypyc adds goes to its top)."""
    with tempfile.TemporaryDirectory(prefix="compile-core-") as scratch:
        # Built from a scratch copy of bridge/ alone: setuptools would read the project's pyproject.toml otherwise.
        work = Path(scratch)
        shutil.copytree(ROOT / "bridge", work / "bridge", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        config = work / "mypy.ini"
        config.write_text(_MYPY_INI)
        result = subprocess.run(
            [sys.executable, "-c", _SETUP, "--config-file", str(config), *sources()],
            cwd=work, capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            raise SystemExit(f"mypyc failed (exit {result.returncode}):\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
        built = [p for p in work.rglob("*.so") if "build" not in p.relative_to(work).parts]
        for path in built:
            target = into / path.relative_to(work)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def clean(base: Path) -> int:
    removed = 0
    for path in [*base.glob("*__mypyc*.so"), *(p for m in MODULES for p in _extensions(base, m))]:
        path.unlink()
        removed += 1
    return removed


def _extensions(base: Path, module: str) -> list[Path]:
    parts = module.split(".")
    return list((base / Path(*parts[:-1])).glob(f"{parts[-1]}.*.so"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("out_dir", nargs="?", type=Path, help="build a compiled copy of bridge/ here (replaced)")
    where.add_argument("--in-place", action="store_true", help="compile beside the sources in this checkout")
    where.add_argument("--clean", action="store_true", help="remove compiled modules from this checkout")
    args = parser.parse_args(argv)
    if args.clean:
        print(f"removed {clean(ROOT)} compiled file(s) from {ROOT}")
        return 0
    started = time.monotonic()
    if args.in_place:
        base = ROOT
    else:
        base = args.out_dir.resolve()
        if base == ROOT or base in ROOT.parents:
            parser.error(f"OUT_DIR {args.out_dir} holds this checkout; name a directory of its own, e.g. .run/compiled")
        if base.exists() and any(base.iterdir()) and not (base / _MARKER).exists():
            parser.error(f"OUT_DIR {args.out_dir} is not empty and not a compiled copy made before; it would be "
                         "replaced, so name an empty or new directory")
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        (base / _MARKER).write_text("a compiled copy made by ops/compile_core.py; replaced by its next run\n")
        for name in _COPIED:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, base / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
            else:
                shutil.copy2(ROOT / name, base / name)
    compile_core(base)
    print(f"compiled {len(MODULES)} modules with mypyc in {base} ({time.monotonic() - started:.0f} s): "
          + ", ".join(MODULES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
