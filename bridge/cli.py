"""`outbox-bridge`: run the daemon, migrate the outbox, grant least-privilege roles, show status, check topics,
check everything (doctor).

Configuration comes from flags, then environment variables, then a TOML file (`--config` or
OUTBOX_CONFIG_FILE), then defaults. The exit codes are those of `bridge.exits`, listed in `--help`;
`doctor` exits 1 when a check failed.
New here? Start with `outbox-bridge doctor`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap

from bridge import cli_common, cli_keep, exits
from bridge.errors import ConfigurationError, DatabaseLoginError, OutboxError, TopicSafetyError
from bridge.exits import EXIT_DB_LOGIN, EXIT_ERROR, EXIT_REFUSED, EXIT_UNSAFE, EXIT_USAGE

log = logging.getLogger("bridge.cli")

#: What `outbox-bridge --help` says below the commands: where settings come from, and the exit codes.
EPILOG = "\n".join((
    textwrap.fill("Configuration comes from flags, then environment variables, then a TOML file (`--config` or "
                  f"OUTBOX_CONFIG_FILE), then defaults. {exits.described()} `doctor` exits 1 when a check failed.",
                  width=110),
    "New here? Start with `outbox-bridge doctor`.",
))


def _topic_retention(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic-retention", dest="topic_retention", metavar="forever|DURATION",
                        help="how long topics the bridge creates keep records: forever (default: retention.ms=-1, "
                        "so a projection rebuilt from earliest, or a new consumer, sees every event) or 30d, 2w; "
                        "an existing topic's retention is never shortened (BRIDGE_TOPIC_RETENTION)")


# ------------------------------------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    from bridge import logs
    from bridge.compiled import compiled_modules
    from bridge.daemon import build_daemon
    from bridge.daemon.memory import daemon_gc
    from bridge.http import serve

    config = cli_common.config(args)
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
        url = cli_common.config(args).db_url.get_secret_value()
    return migrate_command(url, sql=args.sql, revision=args.revision, downgrade=args.downgrade)


def cmd_grants(args: argparse.Namespace) -> int:
    from bridge import grants

    config = cli_common.config(args)
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

    config = cli_common.config(args)
    status = collect_status(config.database)
    if args.json:
        print(json.dumps(status, indent=2, default=str))
    else:
        render_status(status)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from bridge.doctor import doctor_command

    return doctor_command(cli_common.config(args), args.json)


def cmd_topics(args: argparse.Namespace) -> int:
    from bridge.status import topics_command

    return topics_command(cli_common.config(args), args.action, args.json, extra_topics=args.topic or [])


def cmd_replay(args: argparse.Namespace) -> int:
    from bridge import replay, replay_range

    config = cli_common.config(args)
    request = replay.ReplayRequest(
        from_seq=args.from_seq, to_seq=args.to_seq, aggregate_type=args.aggregate_type,
        event_type=args.event_type, mode=args.mode, topic=args.topic, reason=args.reason, dry_run=args.dry_run,
        from_time=replay.parse_time("--from-time", args.from_time) if args.from_time else None,
        to_time=replay.parse_time("--to-time", args.to_time) if args.to_time else None,
        aggregate_ids=tuple(args.aggregate_id or ()),
    )
    if args.dry_run:
        plan = replay.plan_replay(config, request)
        if args.mode == "range":
            plan["topic_verdicts"] = replay_range.check_topics(config, plan["topics"])
        cli_common.report(plan | {"dry_run": True}, args.json, "replay plan (dry run: nothing changed)")
        return 0
    with replay.audited(config.database, request):  # a refusal is on record, with why
        plan = replay.plan_replay(config, request)
    span = f"seq {plan['from_seq']}..{plan['to_seq']}"
    if args.mode == "rewind":
        cli_common.confirm(f"Rewind bridge {config.bridge_name!r} to re-publish {plan['events']} events from seq "
                           f"{plan['from_seq']} (watermark {plan['watermark']})?", args.yes)
        with replay.audited(config.database, request):
            result = replay.rewind(config, request, wait_s=args.wait)
    else:
        cli_common.confirm(f"Publish {plan['events']} events ({span}) to {', '.join(plan['topics']) or 'no topic'}?",
                           args.yes)
        with replay.audited(config.database, request):
            result = replay_range.publish_range(config, request, show_progress=not args.json)
    cli_common.report(result, args.json, f"replay ({args.mode})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="outbox-bridge",
        description="Publish every committed row of the domain_events outbox to Kafka, in seq order, never skipping.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the bridge daemon until SIGTERM/SIGINT",
                         description="Tail domain_events and publish to Kafka. One instance per bridge name "
                                     "publishes; others stand by and take over when its lease expires.")
    cli_common.options(run)
    run.add_argument("--max-in-flight", dest="max_in_flight", type=int,
                     help="events sent but not yet below the watermark (BRIDGE_MAX_IN_FLIGHT)")
    run.add_argument("--metrics-port", dest="metrics_port", type=int,
                     help="port of /metrics, /healthz and /readyz; 0 disables (BRIDGE_METRICS_PORT)")
    run.add_argument("--poison-policy", dest="poison_policy", choices=["halt", "dead-letter"],
                     help="what to do with a row that can never be published (BRIDGE_POISON_POLICY)")
    run.add_argument("--delivery", dest="delivery", choices=["at-least-once", "exactly-once"],
                     help="exactly-once: a transactional producer, for read_committed consumers (BRIDGE_DELIVERY)")
    run.add_argument("--allow-single-broker", dest="allow_single_broker", action="store_const", const=True,
                     help="accept replication factor 1 on a one-broker development cluster "
                     "(BRIDGE_ALLOW_SINGLE_BROKER)")
    run.add_argument("--retention", dest="retention", metavar="DURATION",
                     help="delete published rows older than DURATION (90m, 12h, 7d), never above the watermark, "
                     "every BRIDGE_RETENTION_INTERVAL_S; unset keeps every row (BRIDGE_RETENTION)")
    run.add_argument("--start-from", dest="start_from", metavar="earliest|SEQ",
                     help="where to start when rows this name has not published were deleted, or the name is new "
                     "or retired: earliest (the oldest row still in the outbox) or a seq; audited, and ignored "
                     "once the name leads from its watermark (BRIDGE_START_FROM)")
    _topic_retention(run)
    run.add_argument("--plain-logs", action="store_true", help="human-readable logs instead of JSON lines")
    run.set_defaults(func=cmd_run)

    migrate = sub.add_parser("migrate", help="create or upgrade the outbox tables (Alembic)",
                             description="Apply the migrations to OUTBOX_DB_URL, or print their DDL with --sql "
                                         "for a DBA to apply (works offline, e.g. for mssql+pyodbc:// URLs).")
    cli_common.options(migrate)
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
    cli_common.options(grants)
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
    cli_common.options(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)

    doctor = sub.add_parser(
        "doctor", help="check everything the bridge depends on; exit 1 if anything failed",
        description="Checks, each bounded in time, and says what to do about each problem: the database "
                    "(reachable, migrated to the newest revision, the never-skip seq path, the login's privileges), "
                    "the lease, the watermark against the head, what holds the horizon back, retention, and Kafka "
                    "(reachable with the configured settings, topics safe, ACLs). Exits 1 if any check failed "
                    "(warnings do not), so it can gate a deployment.")
    cli_common.options(doctor)
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
    cli_common.options(topics)
    topics.add_argument("action", choices=["check", "ensure"],
                        help="check: report and exit 4 if unsafe; ensure: create or fix what is safe to fix")
    _topic_retention(topics)
    topics.add_argument("--topic", action="append", help="also check this topic (repeatable)")
    topics.add_argument("--json", action="store_true", help="machine-readable output")
    topics.set_defaults(func=cmd_topics)

    replay = sub.add_parser(
        "replay", help="re-publish events from a seq or a time (rewind the bridge, or publish a range)",
        description="rewind (default): move the bridge's watermark back so the live bridge re-publishes "
                    "everything from --from-seq (or from the first seq at or after --from-time); works while it "
                    "runs (it picks the request up) or is stopped. range: publish a range (seqs or a time "
                    "window, optionally only some aggregate types, event types or aggregate ids) to the events' "
                    "topics or to --topic, leaving the watermark alone; a missing --topic is created with the "
                    "bridge's safe settings when allowed, else refused before anything is sent. Every attempt, "
                    "refused and failed ones included, is recorded in bridge_replay_audit.",
        epilog="examples:\n"
               "  outbox-bridge replay --from-time 2026-11-26T14:00:00Z --dry-run      # where would a rewind start?\n"
               "  outbox-bridge replay --mode range --from-seq 2698 --to-seq 5397 --aggregate-type customer \\\n"
               "      --topic repair.customers --reason 'feed the repair job' --yes\n"
               "  outbox-bridge replay --mode range --from-time 2026-11-26T14:00:00Z --aggregate-id order-42 \\\n"
               "      --reason 'order-42 again for billing' --yes",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_common.options(replay)
    replay.add_argument("--from-seq", type=int, help="first seq to publish again (or --from-time)")
    replay.add_argument("--from-time", metavar="TIME",
                        help="start at the first event whose occurred_at is at or after TIME (ISO 8601 with its "
                        "offset, e.g. 2026-11-26T14:00:00Z, or ts:<epoch ms>); the plan says which seq")
    replay.add_argument("--to-seq", type=int, help="last seq (range mode; default: the watermark)")
    replay.add_argument("--to-time", metavar="TIME", help="range mode: only events that occurred at or before TIME")
    replay.add_argument("--mode", choices=["rewind", "range"], default="rewind")
    replay.add_argument("--aggregate-type", help="range mode: only this aggregate type")
    replay.add_argument("--aggregate-id", action="append", metavar="ID",
                        help="range mode: only this aggregate's events (repeatable)")
    replay.add_argument("--event-type", help="range mode: only this event type")
    replay.add_argument("--topic", help="range mode: publish to this topic instead of each event's own (created "
                        "with the bridge's safe settings if missing and BRIDGE_ALLOW_CREATE_TOPICS allows)")
    replay.add_argument("--reason", help="why, for the audit log")
    replay.add_argument("--dry-run", action="store_true",
                        help="print how many events, which seqs and topics, and each topic's verdict; change nothing")
    replay.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    replay.add_argument("--wait", type=float, default=60.0,
                        help="seconds to wait for a running bridge to apply a rewind (default 60)")
    replay.add_argument("--json", action="store_true", help="machine-readable output")
    replay.set_defaults(func=cmd_replay)

    cli_keep.add_parsers(sub)
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
    except TopicSafetyError as exc:
        print(f"outbox-bridge: unsafe topic: {exc}", file=sys.stderr)
        return EXIT_UNSAFE
    except ConfigurationError as exc:
        print(f"outbox-bridge: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutboxError as exc:
        print(f"outbox-bridge: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
