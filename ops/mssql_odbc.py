"""Register Microsoft's ODBC Driver 18 for SQL Server, as shipped in the PyPI package `mssql-python-odbc`,
with unixODBC for this project only: writes `<dir>/odbcinst.ini`; point ODBCSYSINI at `<dir>`.

    python ops/mssql_odbc.py .run/odbc        (what `make mssql-driver` runs)

Nothing outside `<dir>` is touched: no /etc/odbcinst.ini, no root needed. unixODBC itself (libodbc.so.2,
which pyodbc loads, and libltdl.so.7, which the driver loads) comes from the system: `apt-get install unixodbc`.
Exits 1 with what to install when something is missing.
"""

from __future__ import annotations

import ctypes.util
import platform
import sys
from pathlib import Path

DRIVER_NAME = "ODBC Driver 18 for SQL Server"
# The wheel keeps one build per Linux family, under libs/linux/<family>/<arch>/lib.
FAMILIES = {"debian": "debian_ubuntu", "ubuntu": "debian_ubuntu", "rhel": "rhel", "fedora": "rhel",
            "centos": "rhel", "suse": "suse", "opensuse": "suse", "sles": "suse"}


def linux_family() -> str:
    """The wheel's name for this Linux family, from /etc/os-release (ID, then ID_LIKE)."""
    fields: dict[str, str] = {}
    for line in Path("/etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        fields[key] = value.strip().strip('"')
    for name in [fields.get("ID", ""), *fields.get("ID_LIKE", "").split()]:
        if name in FAMILIES:
            return FAMILIES[name]
    raise SystemExit(f"mssql-python-odbc ships no driver for this Linux ({fields.get('PRETTY_NAME', '?')}); "
                     "install Microsoft's ODBC Driver 18 from packages.microsoft.com instead")


def driver_library() -> Path:
    try:
        import mssql_python_odbc
    except ImportError as exc:
        raise SystemExit("mssql-python-odbc is not installed in this environment: run `make mssql-driver`") from exc
    lib = Path(mssql_python_odbc.get_libs_dir()) / "linux" / linux_family() / platform.machine() / "lib"
    found = sorted(lib.glob("libmsodbcsql-*.so*"))
    if not found:
        raise SystemExit(f"no libmsodbcsql-*.so under {lib}: this machine's architecture may not be shipped")
    return found[-1]


def main(argv: list[str]) -> int:
    if sys.platform != "linux":
        print(f"on {sys.platform}, install {DRIVER_NAME} the platform's way (Homebrew msodbcsql18, or Microsoft's "
              "installer); nothing to register here", file=sys.stderr)
        return 1
    missing = [name for name in ("odbc", "ltdl") if ctypes.util.find_library(name) is None]
    if missing:
        print(f"missing system libraries {', '.join('lib' + m for m in missing)}: apt-get install unixodbc",
              file=sys.stderr)
        return 1
    target = Path(argv[1] if len(argv) > 1 else ".run/odbc").resolve()
    target.mkdir(parents=True, exist_ok=True)
    library = driver_library()
    (target / "odbcinst.ini").write_text(
        f"[{DRIVER_NAME}]\nDescription=Microsoft ODBC Driver 18 for SQL Server (PyPI mssql-python-odbc)\n"
        f"Driver={library}\nUsageCount=1\n"
    )
    print(f"registered {DRIVER_NAME} -> {library}\nexport ODBCSYSINI={target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
