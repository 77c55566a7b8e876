"""The layout: no import circles in `bridge/`, `projections/` or `ops/`, imports made inside functions or only
for type checking included (a circle hidden behind a function-local or a TYPE_CHECKING import is still a
circle); no module in them over 350 lines; and the bridge's pure core imports nothing with I/O."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ["bridge", "projections", "ops"]
#: A module longer than this usually holds two concepts: split it by concept.
MOST_LINES = 350


def _import_root(path: Path) -> Path:
    """The folder on `sys.path` from which `path` is imported: the nearest one above it that is not a package
    (the repository root for bridge/ and projections/; ops/ itself for its scripts and its `stack` package)."""
    folder = path.parent
    while (folder / "__init__.py").exists():
        folder = folder.parent
    return folder


def _modules(package: str) -> dict[str, Path]:
    """Every module under the folder `package`, by the name its importers use."""
    modules = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(_import_root(path)).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imports(name: str, source: str, modules: dict[str, Path]) -> set[str]:
    """Every module of the package that `name` (its `source`) imports anywhere, with the packages that
    imports run."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                named.add(child if child in modules else node.module)
        elif isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
    found = set()
    for module in named:
        parts = module.split(".")
        # Importing a.b.c runs a's and a.b's __init__ too.
        found.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
    return {m for m in found if m in modules and m != name and not name.startswith(m + ".")}


def _graph(package: str) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: _imports(name, path.read_text(), modules) for name, path in modules.items()}


@pytest.mark.parametrize("package", FOLDERS)
def test_a_package_has_no_import_circles(package: str) -> None:
    try:
        tuple(TopologicalSorter(_graph(package)).static_order())
    except CycleError as exc:
        pytest.fail(f"import circle in {package}/: {' -> '.join(exc.args[1])}")


@pytest.mark.parametrize("package", FOLDERS)
def test_no_module_is_longer_than_a_sitting(package: str) -> None:
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
               for path in sorted((ROOT / package).rglob("*.py"))}
    too_long = {name: lines for name, lines in lengths.items() if lines > MOST_LINES}
    assert not too_long, f"over {MOST_LINES} lines, split by concept: {too_long}"


def test_the_core_is_pure() -> None:
    graph = _graph("bridge")
    for name, imported in graph.items():
        if name.startswith("bridge.core"):
            assert all(module.startswith(("bridge.core", "bridge.errors")) for module in imported), (name, imported)
    io_libraries = {"sqlalchemy", "confluent_kafka", "socket", "threading", "subprocess"}
    for path in (ROOT / "bridge" / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not {n.split(".")[0] for n in names} & io_libraries, (path.name, names)


def test_the_check_sees_a_circle() -> None:
    graph = _graph("bridge")
    graph["bridge.core.holes"] = graph["bridge.core.holes"] | {"bridge.daemon.loop"}
    with pytest.raises(CycleError):
        tuple(TopologicalSorter(graph).static_order())


def test_the_check_sees_an_import_made_only_for_type_checking() -> None:
    source = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from projections.lake import Lake\n"
    assert _imports("projections.horizon", source, _modules("projections")) == {"projections.lake"}


def test_the_check_names_ops_modules_as_their_scripts_import_them() -> None:
    """ops/ is run as scripts: its folder is on the path, so a script is `localstack` and the package `stack`."""
    modules = _modules("ops")
    assert {"localstack", "connect", "stack", "stack.kafka"} <= modules.keys()
    assert _imports("localstack", "from stack.cli import main\n", modules) == {"stack", "stack.cli"}
    assert _imports("stack.cli", "from stack import connect\n", modules) == {"stack.connect"}


@pytest.mark.parametrize("package", ["bridge", "projections", "ops"])
def test_unit_tests_mirror_the_packages(package: str) -> None:
    """A unit test sits in the folder of what it tests (tests/unit/bridge/daemon/ for bridge/daemon/), so a
    maintainer finds a module's tests by its path; a test folder with no package beside it has lost its way."""
    tests = ROOT / "tests" / "unit" / package
    assert tests.is_dir(), f"no tests/unit/{package}/"
    stray = sorted(folder.relative_to(ROOT / "tests" / "unit").as_posix() for folder in tests.rglob("*")
                   if folder.is_dir() and folder.name != "__pycache__"
                   and not (ROOT / folder.relative_to(ROOT / "tests" / "unit")).is_dir())
    assert not stray, f"unit test folders with no package of that path: {stray}"
    flat = sorted(path.name for path in (ROOT / "tests" / "unit").glob("test_*.py") if path.name != "test_layout.py")
    assert not flat, f"unit tests outside the mirror of the packages: {flat}"
