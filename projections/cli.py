"""`outbox-projections`: list, run, replay, status and maintain the declared projections.

Settings come from flags, then environment variables, then a TOML file (`--config` or
PROJECTIONS_CONFIG_FILE), then defaults. Exit codes: 0 ok, 1 error, 2 bad usage or configuration,
3 unknown projection, 5 refused (nothing changed); `doctor` exits 1 when a check failed. When Kafka
refuses the projection's principal, `run` and `replay` stop before Spark starts: 7 wrong password or
unknown user, 8 the brokers' TLS certificate is not trusted (as for the bridge).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from bridge.errors import ConfigurationError, OutboxError
from bridge.kafka.access import KafkaAccessError
from projections.errors import RefusedError, UnknownProjectionError

log = logging.getLogger("projections.cli")

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_REFUSED = 5


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (also PROJECTIONS_CONFIG_FILE)")
    parser.add_argument(
        "--lake", help="lake root; tables at <lake>/<name> (PROJECTIONS_LAKE_PATH, .run/lake)"
    )
    parser.add_argument(
        "--module",
        dest="modules",
        action="append",
        metavar="MODULE",
        help="import projection declarations (PROJECTIONS) from MODULE; repeatable "
        "(PROJECTIONS_MODULES, comma-separated)",
    )
    parser.add_argument("--plain-logs", action="store_true", help="plain text logs instead of JSON lines")


def _projection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="projection name (see `outbox-projections list`)")
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (KAFKA_BOOTSTRAP_SERVERS)")
    parser.add_argument(
        "--topic-template",
        help="topic per aggregate type, e.g. outbox.event.{aggregate_type} (BRIDGE_TOPIC_TEMPLATE)",
    )


def _run_flags(parser: argparse.ArgumentParser) -> None:
    _projection_flags(parser)
    parser.add_argument("--available-now", action="store_true", default=None,
                        help="process everything available now, then stop")
    parser.add_argument("--trigger-interval", dest="trigger_interval_s", type=float, metavar="S",
                        help="seconds between micro-batches when running continuously (default 10)")
    parser.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                        help="at most N Kafka records per micro-batch (default: no limit)")
    parser.add_argument("--starting-offsets", metavar="earliest|latest",
                        help="where a new checkpoint starts (default earliest); an existing one resumes. A table "
                        "built from scratch from earliest is refused when Kafka has deleted a partition's first "
                        "records (exit 5), unless --accept-truncated-history")
    parser.add_argument("--no-fail-on-data-loss", dest="fail_on_data_loss", action="store_false", default=None,
                        help="keep going when offsets vanished before being read (default: stop)")
    parser.add_argument("--accept-truncated-history", action="store_true", default=None,
                        help="build the table from scratch even though retention (or delete-records) has deleted "
                        "the first records of a partition it reads from earliest: the table then lacks every event "
                        "before the first offset kept. Without it that build is refused, naming the partitions "
                        "and the first offsets kept; the progress record notes where the history starts")
    parser.add_argument("--metrics-port", type=int,
                        help="Prometheus port on the driver, 0 disables (PROJECTIONS_METRICS_PORT, 9465)")
    parser.add_argument("--metrics-host", help="Prometheus listen address (127.0.0.1)")


def _settings(args: argparse.Namespace) -> Any:
    from projections.settings import load_settings

    names = ("lake", "bootstrap_servers", "topic_template", "available_now", "trigger_interval_s",
             "max_offsets_per_trigger", "starting_offsets", "fail_on_data_loss", "metrics_port", "metrics_host",
             "accept_truncated_history")
    flags: dict[str, Any] = {k: getattr(args, k, None) for k in names}
    if args.modules:
        flags["modules"] = ",".join(args.modules)
    return load_settings(flags=flags, toml_path=args.config)


def _catalog(settings: Any) -> Any:
    from projections.catalog import load_catalog

    return load_catalog(settings.modules)


# ------------------------------------------------------------------------------------------- commands


def cmd_list(args: argparse.Namespace) -> int:
    from projections.catalog import list_command

    settings = _settings(args)
    return list_command(_catalog(settings), settings.topic_template, args.json)


def cmd_run(args: argparse.Namespace) -> int:
    from projections.driver import run_projection

    settings = _settings(args)
    run_projection(settings, _catalog(settings).get(args.name))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from projections import replay

    settings = _settings(args)
    projection = _catalog(settings).get(args.name)
    projection.source_option(settings.topic_template)
    if args.rebuild and not args.in_place:
        print(
            "--rebuild goes with --in-place: without it the replay already builds a new table and switches "
            "over to it",
            file=sys.stderr,
        )
        return EXIT_USAGE
    request = replay.ReplayRequest(
        from_offset=args.from_offset,
        in_place=bool(args.in_place),
        rebuild=bool(args.rebuild),
        drop_earlier_state=bool(args.drop_earlier_state),
        switch_timeout_s=args.switch_timeout,
    )
    plan = replay.plan_replay(projection, settings, request)
    if args.dry_run or not args.yes:
        print(json.dumps(plan.summary(), indent=2))
    refusal = plan.refusal()
    if refusal is not None:
        raise RefusedError(refusal)
    if args.dry_run or not args.yes:
        if not args.dry_run:
            print(f"Nothing changed. {plan.next_step()}", file=sys.stderr)
            return EXIT_REFUSED
        return 0
    replay.run_replay(plan, settings)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from projections.status import status_command

    settings = _settings(args)
    return status_command(_catalog(settings).get(args.name), settings, lag=args.lag, json_output=args.json)


def cmd_doctor(args: argparse.Namespace) -> int:
    from projections.doctor import doctor_command

    settings = _settings(args)
    return doctor_command(_catalog(settings).get(args.name), settings, args.json)


def cmd_maintain(args: argparse.Namespace) -> int:
    from projections.maintenance import DEFAULT_RETAIN_HOURS, maintain_command

    settings = _settings(args)
    projection = _catalog(settings).get(args.name)
    if args.retain_hours < DEFAULT_RETAIN_HOURS and not args.allow_short_retention:
        print(
            f"--retain-hours {args.retain_hours} is below Delta's safe {DEFAULT_RETAIN_HOURS}: "
            "a running query "
            "or a reader may still need those files. Add --allow-short-retention if you mean it.",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    return maintain_command(projection, settings, args.retain_hours, not args.no_purge)


# ------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="outbox-projections", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("list", help="list the declared projections")
    _common(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = commands.add_parser("run", help="run a projection (continuously, or --available-now)")
    _common(p)
    _run_flags(p)
    p.set_defaults(func=cmd_run)

    p = commands.add_parser(
        "replay",
        help="rebuild a projection from a point in its topics, into a new table that replaces the live one",
        description="Rebuild a projection from --from-offset. By default into a new table beside the live one "
        "(new checkpoint, new txnAppId): readers keep the live table while it is built; once it has caught up "
        "the replay waits for the running instance to stop, drains what arrived meanwhile and switches over "
        "in one Delta commit, then runs on as the live instance (or stops, with --available-now). With "
        "--in-place it resets the live checkpoint instead and relies on idempotency. A table built from a point "
        "other than earliest lacks what earlier events made, so that is refused unless --drop-earlier-state. "
        "A table rebuilt from earliest when Kafka has deleted a partition's first records (retention, "
        "delete-records) would lack every event before them: the dry run says so, naming the partitions and the "
        "first offsets kept, and the replay is refused unless --accept-truncated-history. "
        "Exit codes: 0 done, 2 bad usage, 3 unknown projection, 5 refused (nothing changed).",
    )
    _common(p)
    _run_flags(p)
    p.add_argument(
        "--from-offset",
        default="earliest",
        metavar="WHERE",
        help="earliest (default), latest, per-partition JSON '{\"topic\":{\"0\":42}}' (partitions not named "
        "start at the earliest), a time with its offset 2026-11-22T10:00:00Z or ts:<epoch ms> (first record "
        "at or after it, by Kafka timestamp), or seq:<N> (first record whose seq is at least N)",
    )
    p.add_argument("--in-place", action="store_true", help="replay into the live table (stop it first)")
    p.add_argument(
        "--drop-earlier-state",
        action="store_true",
        help="with a --from-offset other than earliest, into a new table (or --in-place --rebuild): accept that "
        "the table then holds only what the events from that point give, dropping keys, versions, log rows "
        "and counts that earlier events made (refused without this flag)",
    )
    p.add_argument("--rebuild", action="store_true", help="with --in-place: delete the table and staging first")
    p.add_argument("--switch-timeout", type=float, metavar="S",
                   help="give up waiting for the live instance to stop after S seconds (default: wait)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the resolved offsets; change nothing")
    p.add_argument("--yes", action="store_true", help="really replay")
    p.set_defaults(func=cmd_replay)

    p = commands.add_parser(
        "status", help="show a projection's progress record (offsets, max seq, last event)"
    )
    _common(p)
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.add_argument("--lag", action="store_true", help="also ask Kafka how many records are not applied yet")
    p.add_argument("--bootstrap-servers", dest="bootstrap_servers")
    p.set_defaults(func=cmd_status)

    p = commands.add_parser(
        "doctor", help="check what a projection depends on; exit 1 if anything failed",
        description="Kafka reachable and the projection's topics there, the lake path writable, the checkpoint and "
        "the table in agreement, the projection's lock and its progress; each with what to do. Exits 1 if a check "
        "failed (warnings do not), so it can gate a deployment.",
    )
    _common(p)
    _projection_flags(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)

    p = commands.add_parser("maintain", help="compact (OPTIMIZE), purge expired tombstones and VACUUM")
    _common(p)
    p.add_argument("name")
    p.add_argument("--retain-hours", type=int, default=168, help="VACUUM retention in hours (default 168)")
    p.add_argument("--allow-short-retention", action="store_true")
    p.add_argument("--no-purge", action="store_true", help="keep expired tombstones")
    p.set_defaults(func=cmd_maintain)
    return parser


def main(argv: list[str] | None = None) -> int:
    from bridge import logs

    args = build_parser().parse_args(argv)
    logs.configure("INFO", json_lines=not args.plain_logs)
    logging.getLogger("py4j").setLevel("WARNING")
    try:
        return int(args.func(args))
    except UnknownProjectionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except RefusedError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KafkaAccessError as exc:
        log.error("Kafka refused the projection; stopping", extra={"error": str(exc), "exit_code": exc.exit_code})
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ConfigurationError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutboxError as exc:
        log.error("projection command failed", extra={"error": str(exc)})
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
