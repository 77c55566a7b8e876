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


def _run_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="projection name (see `outbox-projections list`)")
    parser.add_argument(
        "--bootstrap-servers",
        dest="bootstrap_servers",
        help="Kafka bootstrap servers (KAFKA_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument(
        "--topic-template",
        dest="topic_template",
        help="topic per aggregate type, e.g. outbox.event.{aggregate_type} (BRIDGE_TOPIC_TEMPLATE)",
    )
    parser.add_argument(
        "--available-now",
        dest="available_now",
        action="store_true",
        default=None,
        help="process everything available now, then stop",
    )
    parser.add_argument(
        "--trigger-interval",
        dest="trigger_interval_s",
        type=float,
        metavar="S",
        help="seconds between micro-batches when running continuously (default 10)",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        dest="max_offsets_per_trigger",
        type=int,
        metavar="N",
        help="at most N Kafka records per micro-batch (default: no limit)",
    )
    parser.add_argument(
        "--starting-offsets",
        dest="starting_offsets",
        metavar="earliest|latest",
        help="where a new checkpoint starts (default earliest); an existing one resumes",
    )
    parser.add_argument(
        "--no-fail-on-data-loss",
        dest="fail_on_data_loss",
        action="store_false",
        default=None,
        help="keep going when offsets vanished before being read (default: stop)",
    )
    parser.add_argument(
        "--metrics-port",
        dest="metrics_port",
        type=int,
        help="Prometheus port on the driver, 0 disables (PROJECTIONS_METRICS_PORT, 9465)",
    )
    parser.add_argument("--metrics-host", dest="metrics_host", help="Prometheus listen address (127.0.0.1)")


def _settings(args: argparse.Namespace) -> Any:
    from projections.settings import load_settings

    names = (
        "lake",
        "bootstrap_servers",
        "topic_template",
        "available_now",
        "trigger_interval_s",
        "max_offsets_per_trigger",
        "starting_offsets",
        "fail_on_data_loss",
        "metrics_port",
        "metrics_host",
    )
    flags: dict[str, Any] = {k: getattr(args, k, None) for k in names}
    if args.modules:
        flags["modules"] = ",".join(args.modules)
    return load_settings(flags=flags, toml_path=args.config)


def _catalog(settings: Any) -> Any:
    from projections.catalog import load_catalog

    return load_catalog(settings.modules)


def _session(app_name: str) -> Any:
    from projections.session import build_session

    return build_session(app_name=app_name)


# ------------------------------------------------------------------------------------------- commands


def cmd_list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    catalog = _catalog(settings)
    rows = []
    for name in catalog.names():
        projection = catalog.get(name)
        option, topics = projection.source_option(settings.topic_template)
        rows.append(
            {
                "name": name,
                "kind": projection.kind.name,
                "key": projection.key,
                option: topics,
                "event_types": sorted(projection.event_types) or ["*"],
                "module": catalog.origins[name],
                "description": projection.description,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        source = row.get("subscribe") or row.get("subscribePattern")
        print(f"{row['name']:<28} {row['kind']:<16} {source:<32} {', '.join(row['event_types'])}")
        if row["description"]:
            print(f"{'':<28} {row['description']}")
    return 0


def _serve_metrics(spark: Any, settings: Any, name: str) -> tuple[Any, Any]:
    from prometheus_client import start_http_server

    from projections.metrics import ProgressListener, ProjectionMetrics

    if not settings.metrics_port:
        return None, None
    metrics = ProjectionMetrics()
    spark.streams.addListener(ProgressListener(metrics, {name}))
    server, _ = start_http_server(settings.metrics_port, addr=settings.metrics_host, registry=metrics.registry)
    log.info("serving /metrics", extra={"address": f"http://{settings.metrics_host}:{settings.metrics_port}"})
    return metrics, server


def _locked(lake: Any, name: str) -> Any:
    """The projection's lock, taken at once, or RefusedError naming who holds it."""
    from projections.lock import ProjectionLock

    lock = ProjectionLock(lake, name)
    if not lock.acquire(0):
        raise RefusedError(
            f"projection {name} is already running ({lock.holder()}, lock {lock.path}); stop that instance first"
        )
    return lock


def _check_kafka(settings: Any, projection: Any) -> None:
    """Refused credentials, an untrusted certificate or a topic the principal may not read: one clear error
    now (KafkaAccessError), not Spark's exception after its start, nor a consumer retrying; unreachable
    brokers are left to the source's retries."""
    from bridge.kafka.access import check_connection, check_read_access
    from projections.kafka_clients import consumer_conf

    conf = consumer_conf(settings, "unused")
    conf.pop("group.id")
    if check_connection(conf):
        option, value = projection.source_option(settings.topic_template)
        if option == "subscribe":  # a pattern names no topic to ask about
            check_read_access(conf, [topic for topic in value.split(",") if topic])


def cmd_run(args: argparse.Namespace) -> int:
    from projections import runner
    from projections.lake import Lake

    settings = _settings(args)
    projection = _catalog(settings).get(args.name)
    projection.source_option(settings.topic_template)  # a bad template fails before Spark starts
    log.info("effective settings", extra={"projection": projection.name, "settings": settings.masked()})
    _check_kafka(settings, projection)
    with _locked(Lake(settings.lake), projection.name):
        spark = _session(f"projection-{projection.name}")
        metrics, server = _serve_metrics(spark, settings, projection.name)
        try:
            runner.run(spark, projection, settings, metrics)
        finally:
            if server is not None:
                server.shutdown()
            spark.stop()
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    import contextlib
    import dataclasses

    from projections import replay, runner
    from projections.lake import Lake
    from projections.lock import ProjectionLock
    from projections.new_table import replay_into_new_table
    from projections.offset_search import resolve
    from projections.partial_rebuild import refuse_partial_rebuild
    from projections.starting_point import parse_from_offset

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
    # A malformed value and a refused rebuild fail before anything asks Kafka or starts Spark.
    start_kind, _ = parse_from_offset(args.from_offset)
    refuse_partial_rebuild(
        projection,
        start_kind,
        args.from_offset,
        in_place=args.in_place,
        rebuild=bool(args.rebuild),
        allowed=args.drop_earlier_state,
    )
    _check_kafka(settings, projection)
    starting = resolve(args.from_offset, projection, settings)
    lake = Lake(settings.lake)
    plan = {
        "projection": projection.name,
        "mode": "in place" if args.in_place else "new table, then switch over",
        "from_offset": starting.spec,
        "starting_offsets": starting.offsets,
        "live_table": lake.table(projection.name),
        "rebuild": bool(args.rebuild),
        "drop_earlier_state": bool(args.drop_earlier_state),
    }
    if args.dry_run or not args.yes:
        print(json.dumps(plan, indent=2))
        if not args.dry_run:
            print(
                "Nothing changed. "
                + (
                    "Stop the running instance (the replay resets its checkpoint), then repeat with --yes."
                    if args.in_place
                    else "Repeat with --yes: the live table keeps serving readers while the new one is built; "
                    "the switch waits for the live instance to stop."
                ),
                file=sys.stderr,
            )
            return EXIT_REFUSED
        return 0
    log.info("replay", extra=plan)

    def announce(message: str) -> None:
        print(f"[replay {projection.name}] {message}", file=sys.stderr, flush=True)
        log.info(message, extra={"projection": projection.name})

    with contextlib.ExitStack() as cleanup:
        # In place the live instance must be stopped now; otherwise the replay waits for it before switching.
        lock = _locked(lake, projection.name) if args.in_place else ProjectionLock(lake, projection.name)
        cleanup.callback(lock.release)
        spark = _session(f"projection-replay-{projection.name}")
        cleanup.callback(spark.stop)
        metrics, server = _serve_metrics(spark, settings, projection.name)
        if server is not None:
            cleanup.callback(server.shutdown)
        if args.in_place:
            removed = replay.reset_in_place(spark, projection, lake, bool(args.rebuild))
            announce(f"checkpoint reset (existed: {removed}, rebuild: {bool(args.rebuild)}); "
                     f"reading from {starting.describe()}")
            settings = dataclasses.replace(settings, starting_offsets=starting.offsets)
        else:
            replay_into_new_table(
                spark, projection, settings, starting, lock, wait_s=args.switch_timeout, metrics=metrics,
                announce=announce,
            )
            if settings.available_now:
                return 0
            announce("running on as the live instance")
        runner.run(spark, projection, settings, metrics)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from projections.lake import Lake
    from projections.progress import read_progress

    settings = _settings(args)
    projection = _catalog(settings).get(args.name)
    lake = Lake(settings.lake)
    spark = None if _local(lake) else _session(f"projection-status-{projection.name}")
    progress = read_progress(lake, projection.name, spark)
    report: dict[str, Any] = {
        "projection": projection.name,
        "kind": projection.kind.name,
        "table": lake.table(projection.name),
        "checkpoint": lake.checkpoint(projection.name),
        "quarantine": lake.quarantine(projection.name),
        "progress": None if progress is None else json.loads(progress.to_json()),
    }
    if args.lag and progress is not None:
        report["lag"] = _kafka_lag(settings, projection.name, progress.offsets)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    print(f"projection {projection.name} ({projection.kind.name})\n  table      {report['table']}")
    if progress is None:
        print("  no batch applied yet")
        return 0
    print(f"  batch      {progress.batch_id} at {progress.updated_at}")
    print(f"  max seq    {progress.max_seq}\n  last event {progress.last_event_time}")
    for topic, partitions in progress.offsets.items():
        print(f"  {topic}: " + ", ".join(f"p{p}@{o}" for p, o in partitions.items()))
    if "lag" in report:
        print(f"  lag        {report['lag']}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from projections.doctor import doctor_command

    settings = _settings(args)
    return doctor_command(_catalog(settings).get(args.name), settings, args.json)


def cmd_maintain(args: argparse.Namespace) -> int:
    from projections.lake import Lake
    from projections.maintenance import DEFAULT_RETAIN_HOURS, maintain

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
    spark = _session(f"projection-maintain-{projection.name}")
    try:
        report = maintain(spark, projection, Lake(settings.lake), args.retain_hours, not args.no_purge)
    finally:
        spark.stop()
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def _local(lake: Any) -> bool:
    from projections.lake import is_local

    return bool(is_local(lake.root))


def _kafka_lag(settings: Any, name: str, offsets: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Records in Kafka beyond the recorded offsets, per topic: how far the table is from the stream's end."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from projections.kafka_clients import consumer_conf, group_prefix

    bootstrap = settings.bootstrap_servers
    consumer = Consumer(consumer_conf(settings, f"{group_prefix(name)}status") | {"enable.auto.commit": False})
    lag: dict[str, Any] = {}
    try:
        for topic, partitions in offsets.items():
            total = 0
            for partition, offset in partitions.items():
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, int(partition)), timeout=5)
                total += max(0, high - offset)
            lag[topic] = total
    except KafkaException as exc:
        lag["error"] = f"Kafka at {bootstrap} did not answer: {exc}"
    finally:
        consumer.close()
    return lag


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
        "Exit codes: 0 done, 2 bad usage, 3 unknown projection, 5 refused (nothing changed).",
    )
    _common(p)
    _run_flags(p)
    p.add_argument(
        "--from-offset",
        dest="from_offset",
        default="earliest",
        metavar="WHERE",
        help="earliest (default), latest, per-partition JSON '{\"topic\":{\"0\":42}}' (partitions not named "
        "start at the earliest), a time with its offset 2026-11-22T10:00:00Z or ts:<epoch ms> (first record "
        "at or after it, by Kafka timestamp), or seq:<N> (first record whose seq is at least N)",
    )
    p.add_argument("--in-place", action="store_true", help="replay into the live table (stop it first)")
    p.add_argument(
        "--drop-earlier-state",
        dest="drop_earlier_state",
        action="store_true",
        help="with a --from-offset other than earliest, into a new table (or --in-place --rebuild): accept that "
        "the table then holds only what the events from that point give, dropping keys, versions, log rows "
        "and counts that earlier events made (refused without this flag)",
    )
    p.add_argument("--rebuild", action="store_true", help="with --in-place: delete the table and staging first")
    p.add_argument(
        "--switch-timeout",
        type=float,
        metavar="S",
        help="give up waiting for the live instance to stop after S seconds (default: wait)",
    )
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
    p.add_argument("name", help="projection name (see `outbox-projections list`)")
    p.add_argument("--bootstrap-servers", dest="bootstrap_servers",
                   help="Kafka bootstrap servers (KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--topic-template", dest="topic_template",
                   help="topic per aggregate type, e.g. outbox.event.{aggregate_type} (BRIDGE_TOPIC_TEMPLATE)")
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
