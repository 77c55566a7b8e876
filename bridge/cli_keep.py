"""The `outbox-bridge` commands that decide what the outbox keeps: `cleanup` (retention: deleting what every
bridge name has published), `names` (every bridge name on the outbox, and retiring one) and `dead-letters`
(the poison events set aside, republished or resolved)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from bridge import cli_common


def cmd_names(args: argparse.Namespace) -> int:
    from bridge import names
    from bridge.config import parse_duration

    config = cli_common.config(args)
    if args.names_command == "retire":
        cli_common.confirm(f"Retire bridge name {args.name!r}? It will no longer hold retention back, and rows it "
                           "has not published may then be deleted.", args.yes)
        cli_common.report(names.retire(config.database, args.name, args.reason), args.json, f"retired {args.name}")
        return 0
    listed = names.list_names(config.database, parse_duration(config.retention_hold_alert_after))
    if args.json:
        print(json.dumps(listed, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="bridge names on this outbox (the slowest first)")
    for column in ("name", "watermark", "lag", "leading", "last holder", "last led", "note"):
        table.add_column(column)
    for name in listed:
        note = []
        if name["retired_at"]:
            note.append(f"retired {name['retired_at']}: {name['retired_reason']}")
        if name["holds_retention_back"]:
            note.append("holds retention back")
        if name["not_led_for_long"]:
            note.append("has not led for long: start it, or retire it if it is gone for good")
        table.add_row(name["bridge_name"], str(name["watermark"]), str(name["lag_events"]),
                      name["active_instance"] or "-", name["last_lease_holder"] or "-", name["last_led_at"] or "never",
                      "; ".join(note) or "-")
    Console().print(table)
    return 0


def cmd_dead_letters(args: argparse.Namespace) -> int:
    from bridge import dead_letters

    config = cli_common.config(args)
    if args.dead_letters_command in ("republish", "resolve"):
        to_seq = args.to_seq if args.to_seq is not None else args.seq
        span = f"seq {args.seq}" if to_seq == args.seq else f"seqs {args.seq} to {to_seq}"
        if args.dead_letters_command == "republish":
            cli_common.confirm(f"Publish the open dead letters at {span} to their own topics?", args.yes)
            result = dead_letters.republish(config, args.seq, to_seq, args.reason, show_progress=not args.json)
        else:
            cli_common.confirm(f"Resolve the open dead letters at {span} without publishing them?", args.yes)
            result = dead_letters.resolve(config.database, args.seq, to_seq, args.reason)
        cli_common.report(result, args.json, f"dead letters: {args.dead_letters_command}")
        return 0
    now = datetime.now(UTC)
    listed = [d.as_dict(now) for d in dead_letters.list_dead_letters(config.database, every_status=args.all)]
    if args.json:
        print(json.dumps(listed, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"dead letters of bridge {config.bridge_name!r}" + ("" if args.all else " (open)"))
    for column in ("seq", "event id", "aggregate", "reason", "bytes", "cut", "age", "status"):
        table.add_column(column)
    for d in listed:
        table.add_row(str(d["seq"]), d["event_id"], f"{d['aggregate_type']}/{d['aggregate_id']}", d["reason"],
                      str(d["payload_bytes"]), "yes" if d["payload_truncated"] else "no", f"{d['age_s']:.0f}s",
                      d["status"])
    Console().print(table)
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from bridge.store import maintenance

    config = cli_common.config(args)
    older_than = maintenance.parse_duration(args.older_than)
    plan = maintenance.cleanup(config.database, older_than, dry_run=True)
    if not args.dry_run and plan["rows"]:
        held = f"; held back by bridge {plan['held_back_by']!r}" if plan["held_back_by"] else ""
        cli_common.confirm(f"Delete {plan['rows']} rows older than {args.older_than} that every bridge name has "
                           f"published{held}?", args.yes)
        plan = maintenance.cleanup(config.database, older_than, dry_run=False, batch_size=args.batch_size,
                                   show_progress=not args.json)
    cli_common.report(plan, args.json, "cleanup" + (" (dry run: nothing changed)" if args.dry_run else ""))
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cleanup = sub.add_parser(
        "cleanup", help="delete published rows older than a duration, never above the watermark",
        description="Deletes rows older than --older-than that every bridge name on the outbox has published "
                    "(below the lowest watermark and every pending rewind), never a row with an open dead letter, "
                    "in small batches so the running bridge and the application are not blocked. Each run is "
                    "recorded, so a bridge name whose rows it deleted refuses to lead instead of skipping them.")
    cli_common.options(cleanup)
    cleanup.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 90m, 12h, 7d, 2w")
    cleanup.add_argument("--batch-size", type=int, default=1000, help="rows per delete transaction")
    cleanup.add_argument("--dry-run", action="store_true", help="count only")
    cleanup.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    cleanup.add_argument("--json", action="store_true", help="machine-readable output")
    cleanup.set_defaults(func=cmd_cleanup)

    names = sub.add_parser(
        "names", help="every bridge name on the outbox (watermark, lag, last leader); retire one",
        description="Several bridge names on one outbox publish it to several Kafka clusters, one watermark and "
                    "lease each. Retention deletes only what every name has published, so a name that stopped "
                    "holds it back; `names` shows which, and `names retire NAME --reason ...` (audited) makes a "
                    "name that is gone for good hold nothing back. A retired name leads again only with "
                    "`run --start-from`.")
    cli_common.options(names, json_output=True)
    names.set_defaults(func=cmd_names, names_command="list")
    names_sub = names.add_subparsers(dest="names_command", metavar="ACTION")
    cli_common.options(names_sub.add_parser("list", help="list every name (the default)"), json_output=True,
                       nested=True)
    retire = names_sub.add_parser("retire", help="retire a name: it no longer holds retention back (audited)")
    cli_common.options(retire, json_output=True, nested=True)
    retire.add_argument("name", help="the bridge name to retire (stop its instances first)")
    retire.add_argument("--reason", required=True, help="why, for the audit log")
    retire.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    letters = sub.add_parser(
        "dead-letters", help="poison events sent to the dead-letter topic: list, republish, resolve",
        description="Under BRIDGE_POISON_POLICY=dead-letter a row Kafka can never take goes to the dead-letter "
                    "topic, perhaps cut to fit; the outbox keeps the whole row until the dead letter is resolved. "
                    "list: the open ones. republish SEQ [--to-seq S]: once the cause is fixed (e.g. the topic's "
                    "max.message.bytes raised), publish them to their own topics (a range replay, audited). "
                    "resolve SEQ [--to-seq S] --reason ...: close them without publishing (audited). Either way "
                    "retention may then delete the rows.")
    cli_common.options(letters, json_output=True)
    letters.set_defaults(func=cmd_dead_letters, dead_letters_command="list", all=False)
    letters_sub = letters.add_subparsers(dest="dead_letters_command", metavar="ACTION")
    listing = letters_sub.add_parser("list", help="the open dead letters (the default)")
    cli_common.options(listing, json_output=True, nested=True)
    listing.add_argument("--all", action="store_true", help="republished and resolved ones too")
    for action, help_text in (("republish", "publish them to their own topics once the cause is fixed"),
                              ("resolve", "close them without publishing, with a reason")):
        parser = letters_sub.add_parser(action, help=help_text)
        cli_common.options(parser, json_output=True, nested=True)
        parser.add_argument("seq", type=int, help="the (first) seq")
        parser.add_argument("--to-seq", type=int, help="the last seq of a range (default: SEQ alone)")
        parser.add_argument("--reason", required=action == "resolve", help="why, for the audit log")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
