"""The bridge the benchmarks measure: the wheel built from this checkout, installed into a fresh virtualenv.

Users run what `pip install` gives them, so the benchmarks do too: `install` builds the sdist and from it the wheel
(`python -m build`, the per-event core compiled with mypyc, as `make wheel` does), installs it into a virtualenv in
a temporary folder outside the checkout, pinned to the harness's own versions of its dependencies (so that the
packaging is the only difference from the checkout), and checks that its core loads compiled. Bridge processes and
the measurements that share its record building then run from there (`bench.bridge_process`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("bench.installed")

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Installation:
    """A virtualenv with the wheel installed, and a folder that makes `bench` (and nothing else of the checkout)
    importable for the measurements that run on its interpreter."""

    wheel: str
    home: Path
    bench_path: Path

    @property
    def bin_dir(self) -> Path:
        return self.home / "venv" / "bin"

    @property
    def python(self) -> Path:
        return self.bin_dir / "python"

    def describe(self, modules: int) -> str:
        return (f"compiled with mypyc ({modules} modules), as installed from the wheel `{self.wheel}` into a fresh "
                "virtualenv")

    def remove(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


def _run(args: list[str], what: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {result.returncode}):\n{result.stdout[-2000:]}\n"
                           f"{result.stderr[-2000:]}")
    return result.stdout


def install(dist_dir: Path, source: Path = ROOT) -> Installation:
    """Build the wheel of `source` (this checkout unless given) into `dist_dir`, install it into a new virtualenv under
    the system's temporary folder, and check that its bridge runs every module of its `bridge.compiled.MODULES`
    compiled. The harness (`bench`) stays this checkout's."""
    dist_dir.mkdir(parents=True, exist_ok=True)
    # Nothing of the checkout on the path: pip would take its outbox_bridge.egg-info for an installed copy.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "build", "--outdir", str(dist_dir), str(source)], "building the wheel",
         env={**env, "OUTBOX_COMPILE_CORE": "1"})
    (wheel,) = dist_dir.glob("outbox_bridge-*.whl")
    home = Path(tempfile.mkdtemp(prefix="outbox-bench-"))
    try:
        _run([sys.executable, "-m", "venv", str(home / "venv")], "creating the virtualenv", env)
        constraints = home / "constraints.txt"
        constraints.write_text(_run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], "pip freeze", env))
        # psutil: the measurements that run on this interpreter import bench.bridge_process. The tracing extra:
        # B1-tracing turns the publish spans on (a bridge without OTEL_TRACES_EXPORTER never imports it). The
        # schema-registry extra: B1-formats publishes json-schema values.
        _run([str(home / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              "--constraint", str(constraints), f"{wheel}[tracing,schema-registry]", "psutil"],
             f"installing {wheel.name}", env)
        bench_path = home / "bench-path"
        bench_path.mkdir()
        (bench_path / "bench").symlink_to(ROOT / "bench", target_is_directory=True)
        installation = Installation(wheel=wheel.name, home=home, bench_path=bench_path)
        counts = "from bridge.compiled import MODULES, compiled_modules as c; print(len(c()), len(MODULES))"
        loaded, listed = _run([str(installation.python), "-I", "-c", counts], "importing the bridge").split()
        if loaded != listed:
            raise RuntimeError(f"the bridge installed from {wheel.name} runs {loaded} of {listed} core modules "
                               "compiled; is it a pure-Python wheel?")
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    log.info("bridge installed from %s into %s", wheel.name, home)
    return installation
