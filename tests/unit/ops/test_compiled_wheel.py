"""The build backend (ops/packaging/compiled_wheel.py) decides what a build compiles: the per-event core in a wheel,
nothing in an editable install, and a pure-Python wheel where no C extension can be built unless told to fail.

`make test` builds the real sdist and wheel and installs them (tests/integration/ops/test_wheel.py); these tests
check the decisions without running a build."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from bridge.compiled import MODULES

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(ROOT / "ops" / "packaging"))
    monkeypatch.delenv("OUTBOX_COMPILE_CORE", raising=False)
    import compiled_wheel

    yield compiled_wheel
    sys.modules.pop("compiled_wheel", None)


def test_the_backend_reads_the_modules_to_compile_from_bridge_compiled(backend: ModuleType) -> None:
    assert backend.modules(ROOT) == MODULES
    assert all((ROOT / source).is_file() for source in backend.sources(ROOT))


def test_an_editable_install_compiles_nothing_even_when_told_to(backend: ModuleType,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_COMPILE_CORE", "1")
    with backend._build("editable"):
        assert backend.editable()
        assert backend.extensions() == []
    assert not backend.editable()


def test_outside_a_wheel_build_nothing_is_compiled(backend: ModuleType) -> None:
    assert backend.extensions() == []


def test_a_wheel_build_with_compiling_turned_off_is_pure_python(backend: ModuleType,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_COMPILE_CORE", "0")
    monkeypatch.setenv("CC", "/nonexistent/cc")  # not even probed
    with backend._build("wheel"):
        assert backend.extensions() == []


def test_without_a_c_compiler_a_wheel_falls_back_to_pure_python_and_says_why(
    backend: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CC", "/bin/false")
    with backend._build("wheel"):
        assert backend.extensions() == []
    said = capsys.readouterr().err
    assert "building a pure-Python wheel" in said
    assert "no working C compiler" in said


def test_without_a_c_compiler_a_wheel_that_must_be_compiled_fails(backend: ModuleType,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.setenv("OUTBOX_COMPILE_CORE", "1")
    with backend._build("wheel"), pytest.raises(SystemExit, match="OUTBOX_COMPILE_CORE=1 but the core cannot"):
        backend.extensions()


def test_an_unknown_mode_is_refused_with_the_choices(backend: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_COMPILE_CORE", "yes")
    with pytest.raises(SystemExit, match=r"give auto .* 1 .* or 0"):
        backend.mode()


def test_this_machine_can_compile_the_core(backend: ModuleType) -> None:
    # `make test` installs a C compiler (make sysdeps), so the wheel it builds and smoke-tests is the compiled one.
    assert backend.cannot_compile() is None
