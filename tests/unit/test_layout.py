"""The layout: no import circles in `bridge/` or `projections/`, imports made inside functions or only for
type checking included (a circle hidden behind a function-local or a TYPE_CHECKING import is still a
circle), and the bridge's pure core imports nothing with I/O."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: str) -> dict[str, Path]:
    modules = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
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
        # Importing a.b.c runs a.b's __init__ too.
        found.update(".".join(parts[:end]) for end in range(2, len(parts) + 1))
    return {m for m in found if m in modules and m != name and not name.startswith(m + ".")}


def _graph(package: str) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: _imports(name, path.read_text(), modules) for name, path in modules.items()}


@pytest.mark.parametrize("package", ["bridge", "projections"])
def test_a_package_has_no_import_circles(package: str) -> None:
    try:
        tuple(TopologicalSorter(_graph(package)).static_order())
    except CycleError as exc:
        pytest.fail(f"import circle in {package}/: {' -> '.join(exc.args[1])}")


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
