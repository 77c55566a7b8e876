"""ops/Dockerfile builds and installs the wheel exactly as `make test` does, and runs the same smoke test on it.

No Docker engine runs where the tests run, so the image is not built here; what can be tested is that its steps
are the commands `make test` runs and tests (the build in `make wheel`, the install and ops/wheel_smoke.py in
tests/integration/ops/test_wheel.py), and that the final images are non-root.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "ops" / "Dockerfile").read_text()
FINAL_STAGES = ("bridge", "projections")


def stages() -> dict[str, list[str]]:
    """Each stage's instructions, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    found: dict[str, list[str]] = {}
    current = None
    for line in joined.splitlines():
        line = line.strip()
        match = re.match(r"FROM \S+ AS (\S+)", line)
        if match:
            current = match.group(1)
            found[current] = []
        elif current and line and not line.startswith("#"):
            found[current].append(line)
    return found


def test_the_wheel_is_built_as_make_wheel_builds_it() -> None:
    makefile = re.sub(r"\\\n\s*", " ", (ROOT / "Makefile").read_text())
    made = re.search(r"OUTBOX_COMPILE_CORE=1 \$\(PY\) -m build --outdir", makefile)
    assert made, "make wheel no longer builds with OUTBOX_COMPILE_CORE=1 python -m build"
    assert any("OUTBOX_COMPILE_CORE=1 python -m build --outdir /dist ." in step for step in stages()["wheel"])


def test_the_wheel_stage_copies_everything_the_sdist_is_built_from() -> None:
    copied = {part for step in stages()["wheel"] if step.startswith("COPY ") for part in step.split()[1:-1]}
    manifest = {line.split()[1].split("/")[0] for line in (ROOT / "MANIFEST.in").read_text().splitlines()
                if line.startswith(("include ", "recursive-include "))}
    needed = {"pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "bridge", "projections", "migrations"}
    assert needed | {"ops/packaging"} <= copied | {"ops"} and manifest - {"ops"} <= copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not [path for path in copied if path in ignored], "the build context leaves out a file the build needs"
    assert "**/*.so" in ignored, "compiled modules of a checkout must not reach the image's build"


@pytest.mark.parametrize("stage", FINAL_STAGES)
def test_each_image_installs_the_wheel_and_runs_the_smoke_test_make_test_runs(stage: str) -> None:
    steps = stages()[stage]
    installs = [step for step in steps if "pip install" in step]
    assert installs and all(re.search(r"/tmp/dist/outbox_bridge-\*\.whl", step) for step in installs), installs
    assert not [step for step in steps if re.search(r"pip install .*(--editable|-e |\s\.(\s|$|\[))", step)]
    smoke = [step for step in steps if "/opt/outbox/wheel_smoke.py bridge" in step]
    assert smoke and "--expect-compiled" in smoke[0] and "python -I" in smoke[0]
    assert "COPY ops/wheel_smoke.py /opt/outbox/wheel_smoke.py" in stages()["base"]
    test_wheel = (ROOT / "tests" / "integration" / "ops" / "test_wheel.py").read_text()
    assert '"ops" / "wheel_smoke.py"' in test_wheel and '"bridge", "--work"' in test_wheel


@pytest.mark.parametrize("stage", FINAL_STAGES)
def test_each_image_runs_as_a_numeric_non_root_user(stage: str) -> None:
    steps = stages()[stage]
    users = [step.split()[1] for step in steps if step.startswith("USER ")]
    entrypoint = next(i for i, step in enumerate(steps) if step.startswith("ENTRYPOINT"))
    last_user = max(i for i, step in enumerate(steps) if step.startswith("USER "))
    assert users[-1] == "10001:10001" and last_user < entrypoint


def test_the_bridge_image_listens_beyond_loopback() -> None:
    assert any("BRIDGE_METRICS_HOST=0.0.0.0" in step for step in stages()["bridge"])


def test_the_projections_entrypoint_is_valid_shell() -> None:
    script = ROOT / "ops" / "spark" / "entrypoint.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck"):
        result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout
    assert 'ENTRYPOINT ["/opt/outbox/entrypoint.sh"]' in stages()["projections"]
