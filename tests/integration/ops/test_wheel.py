"""The artefact, not the tree: the sdist and the wheel built from this checkout, installed into a fresh virtualenv in
a temporary folder outside it, run as a user runs them (ops/wheel_smoke.py, by the virtualenv's own interpreter).

`make test` builds the sdist and the wheel first (`make wheel`, into .run/dist, named by OUTBOX_TEST_DIST); run alone,
this module builds them itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from bridge.compiled import MODULES

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "ops" / "wheel_smoke.py"

pytestmark = pytest.mark.integration


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would point a child at the checkout (PYTHONPATH) or configure the
    bridge behind the smoke test's back (BRIDGE_*, OUTBOX_*, KAFKA_*, PROJECTIONS_*), or Spark (the tests'
    SPARK_CONF_DIR: the smoke run keeps Spark's defaults)."""
    leaks = ("BRIDGE_", "OUTBOX_", "KAFKA_", "PROJECTIONS_", "PYTHONPATH", "PYTHONSAFEPATH", "VIRTUAL_ENV",
             "SPARK_CONF_DIR")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(leaks)}, **extra}


def run(args: list[str], cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 900) -> str:
    result = subprocess.run(args, cwd=cwd, env=dict(env) if env is not None else clean_env(), capture_output=True,
                            text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-4000:]}\n" \
                                   f"{result.stderr[-4000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the sdist and the wheel built from it (the compiled core required: OUTBOX_COMPILE_CORE=1)."""
    given = os.environ.get("OUTBOX_TEST_DIST")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out,
        env=clean_env(OUTBOX_COMPILE_CORE="1"))
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    wheels = sorted(dist.glob("outbox_bridge-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {dist}, found {[w.name for w in wheels]}"
    return wheels[0]


@pytest.fixture(scope="module")
def sdist(dist: Path) -> Path:
    found = sorted(dist.glob("outbox_bridge-*.tar.gz"))
    assert len(found) == 1, f"expected one sdist in {dist}, found {[s.name for s in found]}"
    return found[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv, outside the checkout, with the wheel installed (no extras); its bin/ folder."""
    home = tmp_path_factory.mktemp("installed")
    assert ROOT not in home.parents, "the virtualenv must live outside the checkout"
    run([sys.executable, "-m", "venv", str(home / "venv")], cwd=home)
    bin_dir = home / "venv" / "bin"
    run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        cwd=home)
    return bin_dir


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("smoke")


def test_the_wheel_carries_the_compiled_core_and_installs_nothing_top_level_but_bridge_and_projections(
    wheel: Path,
) -> None:
    assert not wheel.name.endswith("-none-any.whl"), f"{wheel.name} is a pure-Python wheel"
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"bridge", "projections"}
    compiled = [n for n in names if n.endswith(tuple(EXTENSION_SUFFIXES))]
    for module in MODULES:
        assert any(n.startswith(module.replace(".", "/") + ".") for n in compiled), f"{module} is not compiled"
    assert all(n.startswith("bridge/") for n in compiled), compiled
    # The migrations ship inside the package, every revision of the repository's folder (whatever it holds).
    revisions = {p.name for p in (ROOT / "migrations" / "versions").glob("*.py")}
    shipped = {n.rsplit("/", 1)[1] for n in names if n.startswith("bridge/migrations/versions/") and n.endswith(".py")}
    assert shipped == revisions
    environment = {"env.py", "alembic.ini", "script.py.mako"}
    assert {f"bridge/migrations/{name}" for name in environment} <= set(names)


def test_the_sdist_holds_what_builds_the_compiled_wheel(sdist: Path) -> None:
    import tarfile

    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "setup.py", "ops/packaging/compiled_wheel.py", "migrations/env.py",
            "migrations/alembic.ini", "bridge/compiled.py"} <= names
    assert not [n for n in names if n.endswith(".so") or "__pycache__" in n]


def test_the_installed_bridge_migrates_publishes_and_reports_with_its_core_compiled(
    venv: Path, work: Path, kafka_bootstrap: str
) -> None:
    said = run([str(venv / "python"), "-I", str(SMOKE), "bridge", "--work", str(work), "--kafka", kafka_bootstrap,
                "--expect-compiled"], cwd=work)
    assert "ok  outbox-bridge status --json: watermark 40, head 40" in said, said


def test_the_installed_projections_list_and_run_once(venv: Path, wheel: Path, work: Path, kafka_bootstrap: str,
                                                     spark_jars_dir: Path) -> None:
    # After the bridge's test (same work folder, its topic), with the `spark` extra added to the same virtualenv.
    assert (work / "smoke.json").exists(), "the bridge's smoke test did not run first"
    run([str(venv / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"{wheel}[spark]"],
        cwd=work)
    said = run([str(venv / "python"), "-I", str(SMOKE), "projections", "--work", str(work), "--kafka",
                kafka_bootstrap], cwd=work,
               env=clean_env(SPARK_JARS_DIR=str(spark_jars_dir), SPARK_LOCAL_IP="127.0.0.1"))
    assert "ok  outbox-projections status --lag: 40 records read" in said, said
    # The projections image's entrypoint hands everything but `executor` to outbox-projections.
    listed = run(["bash", str(ROOT / "ops" / "spark" / "entrypoint.sh"), "list"], cwd=work,
                 env=clean_env(PATH=f"{venv}{os.pathsep}{os.environ['PATH']}"))
    assert "orders_current" in listed


def test_without_a_c_compiler_the_sdist_still_builds_and_installs_as_pure_python(
    sdist: Path, venv: Path, tmp_path: Path
) -> None:
    built = tmp_path / "pure"
    run([str(venv / "python"), "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(built), str(sdist)],
        cwd=tmp_path, env=clean_env(CC="/bin/false"))
    (pure,) = built.glob("*.whl")
    assert pure.name.endswith("-py3-none-any.whl"), pure.name
    assert not [n for n in zipfile.ZipFile(pure).namelist() if n.endswith(tuple(EXTENSION_SUFFIXES))]
    target = tmp_path / "target"
    run([str(venv / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(pure)],
        cwd=tmp_path)
    check = ("import bridge, bridge.migrate as m; from bridge.compiled import compiled_modules;"
             f"assert bridge.__file__.startswith({str(target)!r}), bridge.__file__; assert compiled_modules() == [];"
             "assert 'CREATE TABLE domain_events' in m.sql('postgresql'); print('pure')")
    assert run([str(venv / "python"), "-c", check], cwd=tmp_path, env=clean_env(PYTHONPATH=str(target))) == "pure\n"
