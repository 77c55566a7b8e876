"""`outbox-bridge`: run the daemon, migrate the outbox, grant least-privilege roles, show status, check topics,
check everything (doctor).

Configuration comes from flags, then environment variables, then a TOML file (`--config` or
OUTBOX_CONFIG_FILE), then defaults. Exit codes: 0 ok, 1 error, 2 bad usage or configuration (a database
that is not migrated, or TLS to it that fails verification, included), 3 halted on a poison event, 4 unsafe
topic, 5 request refused (nothing changed), 6 the database refused the login (wrong password or unknown
user: fix OUTBOX_DB_URL or the role, then start again; not retried), and when Kafka refuses the bridge
(not retried either): 7 authentication failed (wrong password or unknown user), 8 the brokers' TLS
certificate is not trusted, 9 an ACL is missing; `doctor` exits 1 when a check failed.
New here? Start with `outbox-bridge doctor`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from bridge.errors import ConfigurationError, DatabaseLoginError, OutboxError

log = logging.getLogger("bridge.cli")

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REFUSED = 5
EXIT_DB_LOGIN = 6


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file (also OUTBOX_CONFIG_FILE)")
    parser.add_argument("--db-url", dest="db_url", help="SQLAlchemy URL of the outbox database (OUTBOX_DB_URL)")
    parser.add_argument("--bootstrap-servers", dest="bootstrap_servers",
                        help="Kafka bootstrap servers (KAFKA_BOOTSTRAP_SERVERS)")
    parser.add_argument("--bridge-name", dest="bridge_name", help="bridge name, one watermark each (BRIDGE_NAME)")
    parser.add_argument("--topic-template", dest="topic_template",
                        help="topic per aggregate type, e.g. outbox.event.{aggregate_type} (BRIDGE_TOPIC_TEMPLATE)")


def _topic_retention(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic-retention", dest="topic_retention", metavar="forever|DURATION",
                        help="how long topics the bridge creates keep records: forever (default: retention.ms=-1, "
                        "so a projection rebuilt from earliest, or a new consumer, sees every event) or 30d, 2w; "
                        "an existing topic's retention is never shortened (BRIDGE_TOPIC_RETENTION)")


def _config(args: argparse.Namespace) -> Any:
    from bridge.config import load_config

    flags = {k: getattr(args, k, None) for k in ("db_url", "bootstrap_servers", "bridge_name", "topic_template",
                                                  "max_in_flight", "metrics_port", "poison_policy",
                                                  "allow_single_broker", "retention", "topic_retention")}
    return load_config(flags=flags, toml_path=args.config)


# ------------------------------------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    from bridge import logs
    from bridge.compiled import compiled_modules
    from bridge.daemon import build_daemon
    from bridge.daemon.memory import daemon_gc
    from bridge.http import serve

    config = _config(args)
    logs.configure(config.log_level.value, json_lines=not args.plain_logs)
    log.info("starting outbox bridge", extra={"config": config.masked(), "compiled_core": compiled_modules()})
    daemon = build_daemon(config)
    daemon.install_signal_handlers()
    server = None
    if config.metrics_port:
        server = serve(config.metrics_host, config.metrics_port, daemon.metrics.registry,
                       lambda: daemon.ready, lambda: {"instance": daemon.instance_id, "last_error": daemon.last_error})
        log.info("serving /metrics, /healthz, /readyz",
                 extra={"address": f"http://{config.metrics_host}:{config.metrics_port}"})
    try:
        with daemon_gc():
            return daemon.run()
    finally:
        if server is not None:
            server.shutdown()


def cmd_migrate(args: argparse.Namespace) -> int:
    from bridge.migrate import migrate_command

    url = args.db_url
    if url is None:
        url = _config(args).db_url.get_secret_value()
    return migrate_command(url, sql=args.sql, revision=args.revision, downgrade=args.downgrade)


def cmd_grants(args: argparse.Namespace) -> int:
    from bridge import grants

    config = _config(args)
    url = config.db_url.get_secret_value()
    dialect = args.dialect or grants.dialect_of(url)
    retention = config.retention_period is not None if args.grant_delete is None else args.grant_delete
    plan = grants.RolePlan(dialect=dialect, writer=args.writer_role, bridge=args.bridge_role, schema=args.schema,
                           retention=retention)
    if args.sql:
        sys.stdout.write(grants.render(plan))
        return 0
    count = grants.apply(url, plan)
    print(f"applied {count} statements: {plan.writer} may append events, {plan.bridge} may publish them "
          f"({'with' if retention else 'without'} DELETE for retention)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from bridge.status import collect_status, render_status

    config = _config(args)
    status = collect_status(config)
    if args.json:
        print(json.dumps(status, indent=2, default=str))
    else:
        render_status(status)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from bridge.doctor import doctor_command

    return doctor_command(_config(args), args.json)


def cmd_topics(args: argparse.Namespace) -> int:
    from bridge.status import topics_command

    return topics_command(_config(args), args.action, args.json, extra_topics=args.topic or [])


def _confirm(question: str, assume_yes: bool) -> None:
    from bridge.errors import RefusedError

    if assume_yes:
        return
    if not sys.stdin.isatty():
        raise RefusedError(f"{question} Refusing without a terminal to ask; pass --yes to confirm")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise RefusedError("not confirmed; nothing changed")


def _report(result: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=False)
    for key, value in result.items():
        table.add_row(key.replace("_", " "), "-" if value is None else str(value))
    Console().print(table)


def cmd_replay(args: argparse.Namespace) -> int:
    from bridge import replay

    config = _config(args)
    request = replay.ReplayRequest(
        from_seq=args.from_seq, to_seq=args.to_seq, aggregate_type=args.aggregate_type,
        event_type=args.event_type, mode=args.mode, topic=args.topic, reason=args.reason, dry_run=args.dry_run,
    )
    plan = replay.plan_replay(config, request)
    if args.dry_run:
        _report(plan | {"dry_run": True}, args.json, "replay plan (dry run: nothing changed)")
        return 0
    if args.mode == "rewind":
        _confirm(f"Rewind bridge {config.bridge_name!r} to re-publish {plan['events']} events from seq "
                 f"{args.from_seq} (watermark {plan['watermark']})?", args.yes)
        result = replay.rewind(config, request, wait_s=args.wait)
    else:
        _confirm(f"Publish {plan['events']} events (seq {args.from_seq}..{plan['to_seq']}) to "
                 f"{', '.join(plan['topics']) or 'no topic'}?", args.yes)
        result = replay.publish_range(config, request, show_progress=not args.json)
    _report(result, args.json, f"replay ({args.mode})")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from bridge.store import maintenance

    config = _config(args)
    older_than = maintenance.parse_duration(args.older_than)
    plan = maintenance.cleanup(config.database, older_than, dry_run=True)
    if not args.dry_run and plan["rows"]:
        _confirm(f"Delete {plan['rows']} published rows older than {args.older_than} (seq <= watermark "
                 f"{plan['watermark']})?", args.yes)
        plan = maintenance.cleanup(config.database, older_than, dry_run=False, batch_size=args.batch_size,
                             show_progress=not args.json)
    _report(plan, args.json, "cleanup" + (" (dry run: nothing changed)" if args.dry_run else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="outbox-bridge",
        description="Publish every committed row of the domain_events outbox to Kafka, in seq order, never skipping.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the bridge daemon until SIGTERM/SIGINT",
                         description="Tail domain_events and publish to Kafka. One instance per bridge name "
                                     "publishes; others stand by and take over when its lease expires.")
    _common(run)
    run.add_argument("--max-in-flight", dest="max_in_flight", type=int,
                     help="events sent but not yet below the watermark (BRIDGE_MAX_IN_FLIGHT)")
    run.add_argument("--metrics-port", dest="metrics_port", type=int,
                     help="port of /metrics, /healthz and /readyz; 0 disables (BRIDGE_METRICS_PORT)")
    run.add_argument("--poison-policy", dest="poison_policy", choices=["halt", "dead-letter"],
                     help="what to do with a row that can never be published (BRIDGE_POISON_POLICY)")
    run.add_argument("--allow-single-broker", dest="allow_single_broker", action="store_const", const=True,
                     help="accept replication factor 1 on a one-broker development cluster "
                     "(BRIDGE_ALLOW_SINGLE_BROKER)")
    run.add_argument("--retention", dest="retention", metavar="DURATION",
                     help="delete published rows older than DURATION (90m, 12h, 7d), never above the watermark, "
                     "every BRIDGE_RETENTION_INTERVAL_S; unset keeps every row (BRIDGE_RETENTION)")
    _topic_retention(run)
    run.add_argument("--plain-logs", action="store_true", help="human-readable logs instead of JSON lines")
    run.set_defaults(func=cmd_run)

    migrate = sub.add_parser("migrate", help="create or upgrade the outbox tables (Alembic)",
                             description="Apply the migrations to OUTBOX_DB_URL, or print their DDL with --sql "
                                         "for a DBA to apply (works offline, e.g. for mssql+pyodbc:// URLs).")
    _common(migrate)
    migrate.add_argument("--sql", action="store_true", help="print the DDL instead of applying it")
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    migrate.add_argument("--downgrade", action="store_true", help="downgrade to --revision instead")
    migrate.set_defaults(func=cmd_migrate)

    grants = sub.add_parser(
        "grants", help="least-privilege roles: an application writer and the bridge (print with --sql, or apply)",
        description="Create a writer role (INSERT on domain_events and what the seq path needs) and a bridge role "
                    "(SELECT on domain_events, DELETE only with retention, read-write on its own tables), each with "
                    "exactly those rights. --sql prints the SQL for a DBA; without it, applies it to OUTBOX_DB_URL, "
                    "which must then be the outbox's owner. Run after the migrations.")
    _common(grants)
    grants.add_argument("--sql", action="store_true", help="print the SQL instead of applying it (works offline)")
    grants.add_argument("--dialect", choices=["postgresql", "mssql"],
                        help="SQL for this database (default: the dialect of OUTBOX_DB_URL)")
    grants.add_argument("--writer-role", default="outbox_writer", help="the application's role (default outbox_writer)")
    grants.add_argument("--bridge-role", default="outbox_bridge", help="the bridge's role (default outbox_bridge)")
    grants.add_argument("--schema", help="the outbox's schema (default: public on PostgreSQL, dbo on SQL Server)")
    grants.add_argument("--retention", dest="grant_delete", action=argparse.BooleanOptionalAction, default=None,
                        help="grant the bridge DELETE on domain_events for retention and cleanup "
                             "(default: on when BRIDGE_RETENTION is set)")
    grants.set_defaults(func=cmd_grants)

    status = sub.add_parser("status", help="watermark, head, lag, lease and what holds the horizon back")
    _common(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)

    doctor = sub.add_parser(
        "doctor", help="check everything the bridge depends on; exit 1 if anything failed",
        description="Checks, each bounded in time, and says what to do about each problem: the database "
                    "(reachable, migrated to the newest revision, the never-skip seq path, the login's privileges), "
                    "the lease, the watermark against the head, what holds the horizon back, retention, and Kafka "
                    "(reachable with the configured settings, topics safe, ACLs). Exits 1 if any check failed "
                    "(warnings do not), so it can gate a deployment.")
    _common(doctor)
    doctor.add_argument("--poison-policy", dest="poison_policy", choices=["halt", "dead-letter"],
                        help="as for run: dead-letter also checks the dead-letter topic (BRIDGE_POISON_POLICY)")
    doctor.add_argument("--allow-single-broker", dest="allow_single_broker", action="store_const", const=True,
                        help="as for run (BRIDGE_ALLOW_SINGLE_BROKER)")
    doctor.add_argument("--retention", dest="retention", metavar="DURATION",
                        help="as for run: also checks the DELETE privilege and overdue rows (BRIDGE_RETENTION)")
    _topic_retention(doctor)
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=cmd_doctor)

    topics = sub.add_parser(
        "topics", help="check or fix the safety settings and the history of the bridge's topics",
        description="check: report each topic's replication, min.insync.replicas, unclean leader election and "
                    "retention; exit 4 if one is unsafe. A topic that deletes or compacts records is a warning that "
                    "says how far back its history goes (and, with BRIDGE_RETENTION, that older events are gone "
                    "everywhere). ensure: create missing topics (every record kept, unless BRIDGE_TOPIC_RETENTION "
                    "says otherwise), fix what is safe to fix, and lengthen a retention shorter than "
                    "BRIDGE_TOPIC_RETENTION; it never shortens one.")
    _common(topics)
    topics.add_argument("action", choices=["check", "ensure"],
                        help="check: report and exit 4 if unsafe; ensure: create or fix what is safe to fix")
    _topic_retention(topics)
    topics.add_argument("--topic", action="append", help="also check this topic (repeatable)")
    topics.add_argument("--json", action="store_true", help="machine-readable output")
    topics.set_defaults(func=cmd_topics)

    replay = sub.add_parser(
        "replay", help="re-publish events from a seq (rewind the bridge, or publish a range)",
        description="rewind (default): move the bridge's watermark back to FROM_SEQ-1 so the live bridge "
                    "re-publishes everything from FROM_SEQ; works while it runs (it picks the request up) or is "
                    "stopped. range: publish FROM_SEQ..TO_SEQ (optionally filtered) to their topics or --topic, "
                    "leaving the watermark alone. Every replay is recorded in bridge_replay_audit.")
    _common(replay)
    replay.add_argument("--from-seq", type=int, required=True, help="first seq to publish again")
    replay.add_argument("--to-seq", type=int, help="last seq (range mode; default: the watermark)")
    replay.add_argument("--mode", choices=["rewind", "range"], default="rewind")
    replay.add_argument("--aggregate-type", help="range mode: only this aggregate type")
    replay.add_argument("--event-type", help="range mode: only this event type")
    replay.add_argument("--topic", help="range mode: publish to this topic instead of each event's own")
    replay.add_argument("--reason", help="why, for the audit log")
    replay.add_argument("--dry-run", action="store_true", help="print how many events, which topics and seqs")
    replay.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    replay.add_argument("--wait", type=float, default=60.0,
                        help="seconds to wait for a running bridge to apply a rewind (default 60)")
    replay.add_argument("--json", action="store_true", help="machine-readable output")
    replay.set_defaults(func=cmd_replay)

    cleanup = sub.add_parser(
        "cleanup", help="delete published rows older than a duration, never above the watermark",
        description="Deletes rows with seq <= the watermark and occurred_at older than --older-than, in small "
                    "batches so the running bridge and the application are not blocked.")
    _common(cleanup)
    cleanup.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 90m, 12h, 7d, 2w")
    cleanup.add_argument("--batch-size", type=int, default=1000, help="rows per delete transaction")
    cleanup.add_argument("--dry-run", action="store_true", help="count only")
    cleanup.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    cleanup.add_argument("--json", action="store_true", help="machine-readable output")
    cleanup.set_defaults(func=cmd_cleanup)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from bridge.errors import RefusedError
    from bridge.kafka.access import KafkaAccessError

    try:
        code: int = args.func(args)
        return code
    except RefusedError as exc:
        print(f"outbox-bridge: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except DatabaseLoginError as exc:
        print(f"outbox-bridge: {exc}", file=sys.stderr)
        return EXIT_DB_LOGIN
    except KafkaAccessError as exc:
        print(f"outbox-bridge: {exc}", file=sys.stderr)
        return exc.exit_code
    except ConfigurationError as exc:
        print(f"outbox-bridge: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutboxError as exc:
        print(f"outbox-bridge: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
