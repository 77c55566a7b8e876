"""The project's build backend: setuptools', with the bridge's per-event core compiled by mypyc into the wheel.

A wheel (`python -m build`, `pip wheel .`, `pip install .`) carries the modules named in `bridge.compiled.MODULES`
as C extension modules beside their sources, as mypy and black ship theirs, so that `pip install` runs the bridge
that docs/BENCHMARKS.md measures. `OUTBOX_COMPILE_CORE` chooses:

- `auto` (the default): compile when a C compiler and Python's headers are there; otherwise build a pure-Python
  wheel and say why on stderr, so that the sdist still installs anywhere;
- `1`: compile or fail (images and CI, which must ship the compiled core);
- `0`: a pure-Python wheel.

An editable install (`pip install -e`) and the sdist never compile: extension modules beside the sources of a
checkout would shadow every later edit of them. `setup.py` asks `extensions()` what to build.
"""

from __future__ import annotations

import ast
import os
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 - the hooks this backend takes over unchanged
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

#: The mypy (and so mypyc) a wheel is compiled with, pinned so that one source gives one compiled core.
MYPY = "mypy==2.4.1"
MODE_ENV = "OUTBOX_COMPILE_CORE"
_MODES = ("auto", "1", "0")
#: The mypy settings of the build: `make lint` runs the project's strict checks; mypyc needs only these. The
#: modules the compiled ones import are read for their types but not judged (`follow_imports = silent`): the build
#: has only the runtime dependencies, so a module using an extra's library (the registry client, whose classes
#: mypy reads through `attrs`) would otherwise fail a build that does not compile it.
_MYPY_INI = "[mypy]\npython_version = 3.11\nignore_missing_imports = True\nfollow_imports = silent\n"
#: Where the extension modules' shared runtime goes: inside `bridge`, so nothing else lands top-level in
#: site-packages (`bridge/_compiled__mypyc.*.so`).
GROUP_NAME = "bridge._compiled"

#: What the backend is building while setuptools runs setup.py: "wheel", "editable" or None (the sdist, metadata).
_building: str | None = None


def mode() -> str:
    """OUTBOX_COMPILE_CORE, checked: `auto` (unset), `1` or `0`."""
    value = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if value not in _MODES:
        raise SystemExit(f"{MODE_ENV}={value!r}: give auto (compile when a C compiler is there), 1 (compile or "
                         "fail) or 0 (pure Python)")
    return value


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    """setuptools' requirements, plus mypy and the project's runtime dependencies when the core is compiled: mypyc
    compiles against the same types as `make lint` checks (orjson's, for one), not against unresolved imports."""
    requires: list[str] = _setuptools.get_requires_for_build_wheel(config_settings)
    if mode() == "0":
        return requires
    return [*requires, MYPY, *_runtime_dependencies()]


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    """setuptools' wheel, with the compiled core (see the module's docstring)."""
    with _build("wheel"):
        name: str = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    return name


def build_editable(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                   metadata_directory: str | None = None) -> str:
    """setuptools' editable wheel: the checkout's sources, never compiled (see `editable()`)."""
    with _build("editable"):
        name: str = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    return name


def editable() -> bool:
    """Whether this build is an editable install, for setup.py: the checkout's root goes on sys.path as it is."""
    return _building == "editable"


@contextmanager
def _build(kind: str) -> Iterator[None]:
    global _building
    _building = kind
    try:
        yield
    finally:
        _building = None


def extensions() -> list[Any]:
    """The mypyc extension modules for setup.py's `ext_modules`: none outside a wheel build, none with
    OUTBOX_COMPILE_CORE=0, none (with a note on stderr) where no C extension can be built and the mode is auto."""
    chosen = mode()
    if _building != "wheel" or chosen == "0":
        return []
    problem = cannot_compile()
    if problem is not None:
        if chosen == "1":
            raise SystemExit(f"{MODE_ENV}=1 but the core cannot be compiled: {problem}")
        print(f"outbox-bridge: building a pure-Python wheel, the per-event core is not compiled: {problem}",
              file=sys.stderr)
        return []
    from mypyc.build import mypycify

    with tempfile.TemporaryDirectory(prefix="outbox-mypyc-") as scratch:
        config = Path(scratch) / "mypy.ini"
        config.write_text(_MYPY_INI)
        built: list[Any] = mypycify(["--config-file", str(config), *sources()], opt_level="3",
                                    group_name=GROUP_NAME)
    return built


def modules(root: Path = Path()) -> tuple[str, ...]:
    """`bridge.compiled.MODULES`, read from the source without importing the project into the build."""
    tree = ast.parse((root / "bridge" / "compiled.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "MODULES" for t in targets) and node.value is not None:
                return tuple(ast.literal_eval(node.value))
    raise SystemExit("bridge/compiled.py defines no MODULES")


def sources(root: Path = Path()) -> list[str]:
    """The source files of `modules()`, relative to `root`."""
    return [str(Path(*name.split(".")).with_suffix(".py")) for name in modules(root)]


def cannot_compile() -> str | None:
    """Why no C extension module can be built here (no mypy, no C compiler, no Python headers), or None."""
    try:
        import mypyc.build  # noqa: F401
    except ImportError as exc:
        return f"mypyc is not importable ({exc})"
    # setuptools, imported above, makes `distutils` its own copy (Python 3.12 has none).
    from distutils import ccompiler, sysconfig  # type: ignore[import-not-found,unused-ignore]
    from distutils.errors import CCompilerError, DistutilsError  # type: ignore[import-not-found,unused-ignore]

    compiler: Any = ccompiler.new_compiler()
    sysconfig.customize_compiler(compiler)
    with tempfile.TemporaryDirectory(prefix="outbox-cc-") as scratch:
        probe = Path(scratch) / "probe.c"
        probe.write_text("#include <Python.h>\nint outbox_probe(void) { return Py_IsInitialized(); }\n")
        try:
            compiler.compile([str(probe)], output_dir=scratch, include_dirs=[sysconfig.get_python_inc()])
        except (CCompilerError, DistutilsError, OSError) as exc:
            return f"no working C compiler with Python's headers ({' '.join(map(str, compiler.compiler_so))}: {exc})"
    return None


def _runtime_dependencies() -> list[str]:
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    return list(project.get("dependencies", []))
