"""The local stack without Docker: Apache Kafka brokers (KRaft), PostgreSQL and, on demand, a schema registry as
processes on loopback.

Everything lives under `.run/` (data, logs, pid files) and the JVM jars under `.cache/jars/`, both at the
repository root. `up` is idempotent and waits until every service answers; `down` stops every process it
started, by pid. Fault tests use `broker-stop` / `broker-start` on a named cluster.

    python ops/localstack.py up [--brokers 3] [--secure]
    python ops/localstack.py down
    python ops/localstack.py status
    python ops/localstack.py kafka-up --cluster kafka3 --brokers 3 --port 29092
    python ops/localstack.py kafka-up --cluster ksecure --brokers 1 --port 39092 --secure
    python ops/localstack.py broker-stop --cluster kafka3 --node 2 [--kill]
    python ops/localstack.py broker-start --cluster kafka3 --node 2
    python ops/localstack.py registry-up [--port 28081]     (json-schema values; see ops/stack/registry.py)
A `--secure` cluster listens with SASL_SSL (SCRAM-SHA-512) only: a CA and broker key made for the run
under `<cluster>/tls/`, the StandardAuthorizer with no access without an ACL, brokers and the controller
talking SASL_SSL too (the controller listener authenticates with PLAIN). Its users, passwords and the CA
path are in `<cluster>/client.env` (mode 0600); see `ops/stack/kafka_security.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from stack import kafka_security
from stack.connect import stop_all
from stack.jars import SETS, ensure_jars
from stack.kafka import KafkaCluster, all_clusters
from stack.places import HOST, JARS, MAIN_CLUSTER, MAIN_KAFKA_PORT, REGISTRY_PORT, RUN
from stack.postgres import Postgres
from stack.processes import StackError, log, stack_lock
from stack.registry import SchemaRegistry, started_registry


def write_env(cluster: KafkaCluster, pg: Postgres) -> Path:
    """`.run/stack.env`; a secured cluster adds its client settings and role users (file mode 0600 then)."""
    env_file = RUN / "stack.env"
    lines = {
        **cluster.client_env(),
        "KAFKA_BROKERS": str(cluster.brokers),
        "OUTBOX_DB_URL": pg.url,
        "OUTBOX_PG_ADMIN_URL": pg.admin_url,
        "OUTBOX_PG_SSLROOTCERT": str(pg.ca_file),
        "SPARK_JARS_DIR": str(JARS / "spark"),
        "PROJECTIONS_LAKE_PATH": str(RUN / "lake"),
    }
    if cluster.secure:
        kafka_security.write_env_file(env_file, lines)
    else:
        env_file.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
    return env_file


def cmd_up(args: argparse.Namespace) -> None:
    with stack_lock():
        if not args.no_spark_jars:
            ensure_jars("spark")
        pg = Postgres()
        if not args.no_postgres:
            pg.up()
        cluster = KafkaCluster(MAIN_CLUSTER, args.brokers, MAIN_KAFKA_PORT, secure=args.secure)
        cluster.up()
        env_file = write_env(cluster, pg)
        log(f"stack is up; settings in {env_file}")


def cmd_down(_: argparse.Namespace) -> None:
    with stack_lock():
        stop_all()  # Kafka Connect workers are the brokers' clients: they stop first
        registry = started_registry()
        if registry is not None:
            if registry.running():
                log("stopping the schema registry")
            registry.down()
        for cluster in all_clusters():
            if cluster.any_running():
                log(f"stopping Kafka {cluster.name}")
            cluster.down()
        pg = Postgres()
        if pg.running():
            log("stopping PostgreSQL")
        pg.down()
        log("stack is down")


def cmd_status(_: argparse.Namespace) -> None:
    pg = Postgres()
    print(f"postgresql  {'up' if pg.running() else 'down':5} {pg.url}")
    for cluster in all_clusters():
        for node in cluster.nodes:
            state = "up" if cluster.node_running(node) else "down"
            port = cluster.controller_port if node == 0 else cluster.client_port(node)
            role = "controller" if node == 0 else "broker"
            print(f"{cluster.name}-{node:<6} {state:5} {HOST}:{port} {role}")
    registry = started_registry() or SchemaRegistry()
    print(f"registry    {'up' if registry.running() else 'down':5} {registry.url}")


def cmd_kafka_up(args: argparse.Namespace) -> None:
    with stack_lock():
        KafkaCluster(args.cluster, args.brokers, args.port, secure=args.secure).up()


def cmd_kafka_down(args: argparse.Namespace) -> None:
    with stack_lock():
        cluster = KafkaCluster.load(args.cluster)
        if cluster is not None:
            cluster.down()
            if args.remove:
                shutil.rmtree(cluster.home, ignore_errors=True)


def _cluster(name: str) -> KafkaCluster:
    cluster = KafkaCluster.load(name)
    if cluster is None:
        raise StackError(f"no Kafka cluster named {name!r} under {RUN}; start it with kafka-up first")
    return cluster


def cmd_broker_stop(args: argparse.Namespace) -> None:
    _cluster(args.cluster).stop_node(args.node, kill=args.kill)


def cmd_broker_start(args: argparse.Namespace) -> None:
    cluster = _cluster(args.cluster)
    cluster.start_node(args.node)
    if args.wait:
        cluster.wait_ready(nodes=[args.node])


def cmd_pg_restart(_: argparse.Namespace) -> None:
    Postgres().restart()


def cmd_pg_up(_: argparse.Namespace) -> None:
    with stack_lock():
        Postgres().up()


def cmd_pg_down(_: argparse.Namespace) -> None:
    with stack_lock():
        Postgres().down()


def cmd_registry_up(args: argparse.Namespace) -> None:
    with stack_lock():
        SchemaRegistry(port=args.port).up()


def cmd_registry_down(_: argparse.Namespace) -> None:
    with stack_lock():
        registry = started_registry()
        if registry is not None:
            registry.down()


def cmd_jars(args: argparse.Namespace) -> None:
    for which in args.which:
        print(ensure_jars(which))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start PostgreSQL and the Kafka cluster, wait until they answer")
    up.add_argument("--brokers", type=int, default=int(os.environ.get("BROKERS", "1")), choices=[1, 3])
    up.add_argument("--no-spark-jars", action="store_true", help="skip resolving the Spark connector jars")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL (SCRAM-SHA-512), TLS made per run, ACLs; client settings in .run/stack.env")
    up.add_argument("--no-postgres", action="store_true", help="start only Kafka (the demo's outbox is SQLite)")
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop every process the stack started").set_defaults(func=cmd_down)
    sub.add_parser("status", help="show what runs").set_defaults(func=cmd_status)
    kup = sub.add_parser("kafka-up", help="start an extra named Kafka cluster (tests)")
    kup.add_argument("--cluster", required=True)
    kup.add_argument("--brokers", type=int, default=3)
    kup.add_argument("--port", type=int, required=True)
    kup.add_argument("--secure", action="store_true", help="SASL_SSL, TLS and ACLs (see --help of up)")
    kup.set_defaults(func=cmd_kafka_up)
    kdown = sub.add_parser("kafka-down", help="stop a named Kafka cluster")
    kdown.add_argument("--cluster", required=True)
    kdown.add_argument("--remove", action="store_true", help="also delete its data, keys and passwords")
    kdown.set_defaults(func=cmd_kafka_down)
    bstop = sub.add_parser("broker-stop", help="stop one broker of a cluster (SIGTERM, or SIGKILL with --kill)")
    bstop.add_argument("--cluster", default=MAIN_CLUSTER)
    bstop.add_argument("--node", type=int, required=True)
    bstop.add_argument("--kill", action="store_true")
    bstop.set_defaults(func=cmd_broker_stop)
    bstart = sub.add_parser("broker-start", help="start one broker of a cluster again")
    bstart.add_argument("--cluster", default=MAIN_CLUSTER)
    bstart.add_argument("--node", type=int, required=True)
    bstart.add_argument("--wait", action="store_true")
    bstart.set_defaults(func=cmd_broker_start)
    sub.add_parser("pg-restart", help="restart PostgreSQL (fault tests)").set_defaults(func=cmd_pg_restart)
    sub.add_parser("pg-up", help="start only PostgreSQL (with TLS), wait until it answers").set_defaults(func=cmd_pg_up)
    sub.add_parser("pg-down", help="stop only PostgreSQL").set_defaults(func=cmd_pg_down)
    rup = sub.add_parser("registry-up", help="start the schema registry (Apicurio, Confluent's API) and wait for it")
    rup.add_argument("--port", type=int, default=REGISTRY_PORT)
    rup.set_defaults(func=cmd_registry_up)
    sub.add_parser("registry-down", help="stop the schema registry (its subjects are gone: in-memory storage)"
                   ).set_defaults(func=cmd_registry_down)
    jars = sub.add_parser("jars", help="resolve JVM jars through Maven into .cache/jars")
    jars.add_argument("which", nargs="+", choices=sorted(SETS))
    jars.set_defaults(func=cmd_jars)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except StackError as exc:
        print(f"[stack] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
