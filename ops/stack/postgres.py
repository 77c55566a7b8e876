"""A private PostgreSQL cluster as a local process: `.run/pg`, listening on 127.0.0.1 only, with TLS.

It runs from Debian's server binaries (installed on first use when run as root) under the `postgres` account,
since PostgreSQL refuses to run as root. The superuser logs in without a password on loopback; every other
role needs its password, so the tests see the same authentication an operator's server asks for.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from stack.certificates import make_certificate_authority, sign_server_certificate
from stack.places import HOST, PG_DATABASE, PG_PORT, ROOT, RUN
from stack.processes import StackError, log, pid_alive, port_open, read_pid, wait_for


def pg_bin() -> Path:
    """The newest installed PostgreSQL server binaries, installing Debian's package when there are none."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        if os.geteuid() != 0:
            raise StackError("PostgreSQL server is not installed: `sudo apt-get install postgresql`, then retry")
        log("installing PostgreSQL from Debian's packages (first run only; its system service left off)")
        subprocess.run([str(ROOT / "ops" / "apt-install.sh"), "postgresql"], check=True)  # a line per package
        candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
        if not candidates:
            raise StackError("apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb was found")
    return Path(candidates[-1]).parent


def as_pg_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root; run it as the `postgres` account the package created."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


class Postgres:
    """A private PostgreSQL cluster in `.run/pg`, listening on 127.0.0.1 only."""

    def __init__(self, port: int = PG_PORT) -> None:
        self.port = port
        self.home = RUN / "pg"
        self.data = self.home / "data"
        self.socket_dir = self.home / "socket"
        self.log_file = RUN / "logs" / "postgres.log"
        self.tls_dir = self.home / "tls"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the server's certificate: clients verify with sslmode=verify-full&sslrootcert=."""
        return self.tls_dir / "ca.crt"

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@{HOST}:{self.port}/postgres"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{HOST}:{self.port}/{PG_DATABASE}"

    def _chown(self, *paths: Path) -> None:
        if os.geteuid() == 0:
            for path in paths:
                shutil.chown(path, "postgres", "postgres")

    def running(self) -> bool:
        pid = read_pid(self.data / "postmaster.pid")
        return pid is not None and pid_alive(pid) and port_open(self.port)

    def up(self) -> None:
        binaries = pg_bin()
        (RUN / "logs").mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if not self.log_file.exists():
            self.log_file.touch()
        self._chown(self.home, self.socket_dir, self.log_file)
        # The postgres account must be able to reach .run/pg through the repository's directories.
        if os.geteuid() == 0:
            for parent in [RUN, *RUN.parents]:
                parent.chmod(parent.stat().st_mode | 0o001)
        if not (self.data / "PG_VERSION").exists():
            log(f"initialising PostgreSQL in {self.data}")
            subprocess.run(
                as_pg_user(
                    [str(binaries / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
                ),
                check=True,
                stdout=subprocess.DEVNULL,
            )
            with open(self.data / "postgresql.conf", "a") as conf:
                conf.write(
                    "\n# outbox local stack\n"
                    f"listen_addresses = '{HOST}'\n"
                    f"port = {self.port}\n"
                    f"unix_socket_directories = '{self.socket_dir}'\n"
                    "max_connections = 300\n"
                    "max_prepared_transactions = 20\n"
                    "shared_buffers = 256MB\n"
                    "wal_level = logical\n"
                    "log_min_messages = warning\n"
                )
        self._ensure_tls()
        changed = self._ensure_access()
        if self.running() and changed:
            # An older stack: TLS and password logins take effect on a reload, without a restart.
            subprocess.run(as_pg_user([str(binaries / "pg_ctl"), "-D", str(self.data), "reload"]),
                           capture_output=True, check=True)
        if not self.running():
            log(f"starting PostgreSQL on {HOST}:{self.port}")
            result = subprocess.run(
                as_pg_user(
                    # Two-phase transactions hold the horizon too; tests need them enabled (also for older data dirs).
                    [str(binaries / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_file), "-w", "-t", "60",
                     "-o", f"-p {self.port} -c max_prepared_transactions=20", "start"]
                ),
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                raise StackError(f"PostgreSQL did not start: {result.stderr or result.stdout}; see {self.log_file}")
        wait_for(lambda: port_open(self.port), f"PostgreSQL on port {self.port}", 60, self.log_file)
        self._ensure_database()
        wait_for(self._tls_on, f"TLS on PostgreSQL port {self.port}", 30, self.log_file)
        log(f"PostgreSQL ready at {self.url} (TLS: sslmode=verify-full&sslrootcert={self.ca_file})")

    def _ensure_tls(self) -> None:
        """A CA and a server certificate for 127.0.0.1 and localhost, made once per run directory."""
        server_crt, server_key = self.tls_dir / "server.crt", self.tls_dir / "server.key"
        if server_crt.exists() and server_key.exists() and self.ca_file.exists():
            return
        log(f"making a CA and a server certificate for PostgreSQL in {self.tls_dir}")
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        make_certificate_authority(self.tls_dir, f"outbox local stack CA {uuid.uuid4().hex[:8]}")
        sign_server_certificate(self.tls_dir, "server", "localhost", ["DNS:localhost", f"IP:{HOST}"])
        server_key.chmod(0o600)
        self._chown(self.tls_dir, server_crt, server_key, self.ca_file)

    def _ensure_access(self) -> bool:
        """TLS on, and password (SCRAM) logins for every role but the stack's passwordless superuser;
        returns whether a file changed. Plain connections keep working: `host` lines match both."""
        tls_conf = self.data / "outbox_tls.conf"
        wanted_conf = (
            "# outbox local stack: TLS with the certificate of .run/pg/tls (made per run directory)\n"
            "ssl = on\n"
            f"ssl_cert_file = '{self.tls_dir / 'server.crt'}'\n"
            f"ssl_key_file = '{self.tls_dir / 'server.key'}'\n"
        )
        hba = self.data / "pg_hba.conf"
        wanted_hba = (
            "# outbox local stack: the superuser postgres logs in without a password (development only, loopback\n"
            "# only); every other role needs its password (SCRAM), over TLS or not.\n"
            "local   all          all                      trust\n"
            "host    all          postgres  127.0.0.1/32   trust\n"
            "host    all          postgres  ::1/128        trust\n"
            "host    all          all       127.0.0.1/32   scram-sha-256\n"
            "host    all          all       ::1/128        scram-sha-256\n"
            "local   replication  all                      trust\n"
            "host    replication  all       127.0.0.1/32   trust\n"
        )
        changed = False
        for path, wanted in ((tls_conf, wanted_conf), (hba, wanted_hba)):
            if not path.exists() or path.read_text() != wanted:
                path.write_text(wanted)
                self._chown(path)
                changed = True
        conf = self.data / "postgresql.conf"
        include = "include_if_exists = 'outbox_tls.conf'\n"
        if include not in conf.read_text():
            with open(conf, "a") as handle:
                handle.write(include)
            changed = True
        return changed

    def _tls_on(self) -> bool:
        import psycopg

        with psycopg.connect(host=HOST, port=self.port, user="postgres", dbname="postgres", sslmode="verify-full",
                             sslrootcert=str(self.ca_file), connect_timeout=5) as conn:
            row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
            return bool(row and row[0])

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(host=HOST, port=self.port, user="postgres", dbname="postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')

    def down(self, mode: str = "fast") -> None:
        if not (self.data / "PG_VERSION").exists() or read_pid(self.data / "postmaster.pid") is None:
            return
        subprocess.run(
            as_pg_user([str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
            capture_output=True,
            check=False,
        )

    def restart(self) -> None:
        self.down()
        self.up()

