"""ops/apt-install.sh, on a stand-in apt-get: apt's output goes to a log file, the terminal gets one line per
package installed, and a failure shows the log's last lines and where the log is."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[3] / "ops" / "apt-install.sh"
PACKAGES = ("libfake1", "fakepkg-common", "fakepkg")

# Prints what apt-get prints, and as much of it: a few hundred lines for one install.
FAKE_APT_GET = f"""#!/bin/sh
case "$1" in
  update)
    for i in $(seq 1 40); do echo "Get:$i https://deb.example/debian stable/main amd64 Packages [9 kB]"; done ;;
  install)
    if [ -n "$FAKE_APT_FAIL" ]; then
      echo "Reading package lists..."; echo "E: Unable to locate package $5" >&2; exit 100
    fi
    [ -x "$APT_INSTALL_POLICY_RC_D" ] && echo "policy-rc.d in place"
    echo "Reading package lists..."
    echo "The following NEW packages will be installed:"
    echo "  {' '.join(PACKAGES)}"
    echo "0 upgraded, {len(PACKAGES)} newly installed, 0 to remove and 0 not upgraded."
    for p in {' '.join(PACKAGES)}; do
      for i in $(seq 1 60); do echo "Get:$i https://deb.example/debian stable/main amd64 $p 1.2-3 [99 kB]"; done
      echo "Selecting previously unselected package $p."
      echo "Unpacking $p (1.2-3) ..."
    done
    for p in {' '.join(PACKAGES)}; do echo "Setting up $p (1.2-3) ..."; done
    echo "debconf: unable to initialize frontend: Dialog" >&2
    echo "Processing triggers for man-db (2.11.2-2) ..." ;;
esac
"""

FAKE_SYSTEMCTL = """#!/bin/sh
echo "Synchronizing state of $2 with SysV service script with /lib/systemd/systemd-sysv-install." >&2
echo "Executing: /lib/systemd/systemd-sysv-install disable ${2%.service}" >&2
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("apt-get", FAKE_APT_GET), ("systemctl", FAKE_SYSTEMCTL), ("update-rc.d", "#!/bin/sh\n")):
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    environment = os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}",
                                "APT_INSTALL_POLICY_RC_D": str(tmp_path / "policy-rc.d"),
                                "APT_INSTALL_LOG_DIR": str(tmp_path / "logs")} | env
    return subprocess.run(["bash", str(SCRIPT), "fakepkg"], capture_output=True, text=True, env=environment,
                          timeout=60, check=False)


def test_the_terminal_gets_one_line_per_package_and_the_log_gets_everything(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "logs" / "apt-install-fakepkg.log"
    assert done.stdout.splitlines() == [
        f"apt-get install fakepkg (apt's output: {log})",
        f"  {len(PACKAGES)} packages to install",
        *(f"  installed {package} (1.2-3)" for package in PACKAGES),
        "installed fakepkg; its system service fakepkg is not running and not enabled at boot",
    ]
    assert done.stderr == ""
    kept = log.read_text()
    assert kept.count("Get:") == 40 + 60 * len(PACKAGES)
    assert "debconf: unable to initialize frontend" in kept and "Synchronizing state of fakepkg.service" in kept
    # The service was held off while apt ran, and the policy that did it is gone afterwards.
    assert "policy-rc.d in place" in kept and not (tmp_path / "policy-rc.d").exists()


def test_a_failure_shows_the_end_of_the_log_and_where_it_is(tmp_path: Path) -> None:
    done = _run(tmp_path, FAKE_APT_FAIL="1")
    assert done.returncode == 100
    log = tmp_path / "logs" / "apt-install-fakepkg.log"
    assert f"apt-get install fakepkg failed (exit 100); the last lines of its log, {log}:" in done.stderr
    assert "  | E: Unable to locate package fakepkg" in done.stderr
    assert "installed fakepkg;" not in done.stdout
