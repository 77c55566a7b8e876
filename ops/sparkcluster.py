"""A Spark standalone cluster on loopback, from the PySpark distribution in the project's venv.

    python ops/sparkcluster.py up [--workers 2]     # a master and its workers; writes .run/spark-cluster.env
    python ops/sparkcluster.py down                 # stops them (and their executors)
    python ops/sparkcluster.py status
    python ops/sparkcluster.py kill-worker N        # kill -9 worker N (a fault test's lost machine)
    python ops/sparkcluster.py start-worker N

Each daemon is `spark-class org.apache.spark.deploy.{master.Master,worker.Worker}` bound to 127.0.0.1,
its web UI on a free port, its logs and work directory under `.run/spark-cluster/`. Workers offer one
core and `--worker-memory` each, so two of them make a cluster that fits this machine beside Kafka and
PostgreSQL. Submit to it with `spark-submit --master spark://127.0.0.1:<port>` (see docs/OPERATIONS.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = Path(os.environ.get("OUTBOX_RUN_DIR", ROOT / ".run")).resolve()
HOME = RUN / "spark-cluster"
ENV_FILE = RUN / "spark-cluster.env"
HOST = "127.0.0.1"
MASTER_PORT = int(os.environ.get("OUTBOX_SPARK_MASTER_PORT", "27077"))
#: The master and worker daemons themselves need little heap; executors get `--worker-memory`.
DAEMON_MEMORY = "256m"


def log(message: str) -> None:
    print(f"[spark-cluster] {message}", flush=True)


def spark_home() -> Path:
    """The PySpark distribution of this interpreter's environment (it ships bin/spark-class and the jars)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def master_url(port: int = MASTER_PORT) -> str:
    return f"spark://{HOST}:{port}"


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def _pid_file(role: str) -> Path:
    return HOME / f"{role}.pid"


def _read_pid(role: str) -> int | None:
    try:
        pid = int(_pid_file(role).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    home = spark_home()
    env.update({
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_HOSTNAME": HOST,
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_LOG_DIR": str(HOME / "logs"),
        # Executors' Python workers run this interpreter, which has the project's dependencies.
        "PYSPARK_PYTHON": sys.executable,
    })
    return env


def _start(role: str, main: str, *args: str) -> int:
    HOME.mkdir(parents=True, exist_ok=True)
    (HOME / "logs").mkdir(exist_ok=True)
    out = (HOME / "logs" / f"{role}.log").open("ab")
    command = [str(spark_home() / "bin" / "spark-class"), main, *args]
    process = subprocess.Popen(command, env=_environment(), stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True, cwd=HOME)
    _pid_file(role).write_text(str(process.pid))
    return process.pid


def _wait(what: str, ready: object, timeout: float, role: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        if _read_pid(role) is None:
            tail = (HOME / "logs" / f"{role}.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"{what} exited while starting; its log ends:\n{tail}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start within {timeout:.0f} s; see {HOME / 'logs' / (role + '.log')}")
        time.sleep(0.3)


def _registered_workers() -> int:
    """How many workers the master's log says registered (its web UI port is random, so read the log)."""
    text = (HOME / "logs" / "master.log").read_text(errors="replace") if (HOME / "logs" / "master.log").exists() else ""
    return text.count("Registering worker")


def start_master(port: int = MASTER_PORT) -> None:
    if _read_pid("master") is not None:
        return
    if _port_open(port):
        raise SystemExit(f"port {port} is taken by another process; set OUTBOX_SPARK_MASTER_PORT to a free one")
    (HOME / "logs" / "master.log").unlink(missing_ok=True)
    _start("master", "org.apache.spark.deploy.master.Master",
           "--host", HOST, "--port", str(port), "--webui-port", "0")
    _wait("the Spark master", lambda: _port_open(port), 120, "master")


def start_worker(number: int, memory: str, port: int = MASTER_PORT) -> None:
    role = f"worker-{number}"
    if _read_pid(role) is not None:
        return
    work_dir = HOME / role
    work_dir.mkdir(parents=True, exist_ok=True)
    before = _registered_workers()
    _start(role, "org.apache.spark.deploy.worker.Worker",
           "--host", HOST, "--cores", "1", "--memory", memory, "--webui-port", "0",
           "--work-dir", str(work_dir), master_url(port))
    _wait(f"Spark worker {number}", lambda: _registered_workers() > before, 120, role)


def kill_worker(number: int) -> None:
    """kill -9 a worker and everything it started (its executor JVMs and their Python workers)."""
    pid = _read_pid(f"worker-{number}")
    if pid is None:
        raise SystemExit(f"worker {number} is not running")
    os.killpg(pid, signal.SIGKILL)
    _pid_file(f"worker-{number}").unlink(missing_ok=True)


def _stop(role: str) -> None:
    pid = _read_pid(role)
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while _read_pid(role) is not None and time.monotonic() < deadline:
                time.sleep(0.2)
            if _read_pid(role) is not None:
                os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _pid_file(role).unlink(missing_ok=True)


def roles() -> list[str]:
    return sorted(p.stem for p in HOME.glob("*.pid")) if HOME.exists() else []


def up(workers: int, memory: str) -> None:
    start_master()
    for number in range(1, workers + 1):
        start_worker(number, memory)
    ENV_FILE.write_text(f"SPARK_MASTER_URL={master_url()}\n")
    log(f"master {master_url()} with {workers} worker(s) of 1 core and {memory}; settings in {ENV_FILE}")
    log("stop it with `make down` or `python ops/sparkcluster.py down`")


def down() -> None:
    for role in roles():
        if role.startswith("worker-"):
            _stop(role)
    _stop("master")
    ENV_FILE.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="start a master and its workers")
    start.add_argument("--workers", type=int, default=2)
    start.add_argument("--worker-memory", default="1g", help="memory each worker offers its executors")
    sub.add_parser("down", help="stop the master and every worker")
    sub.add_parser("status", help="which daemons run")
    kill = sub.add_parser("kill-worker", help="kill -9 one worker and its executors")
    kill.add_argument("number", type=int)
    again = sub.add_parser("start-worker", help="start one worker (again)")
    again.add_argument("number", type=int)
    again.add_argument("--worker-memory", default="1g")
    args = parser.parse_args(argv)
    if args.command == "up":
        up(args.workers, args.worker_memory)
    elif args.command == "down":
        down()
    elif args.command == "status":
        for role in roles():
            pid = _read_pid(role)
            print(f"{role}: {'running, pid ' + str(pid) if pid else 'stopped'}")
    elif args.command == "kill-worker":
        kill_worker(args.number)
    elif args.command == "start-worker":
        start_worker(args.number, args.worker_memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
