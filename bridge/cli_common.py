"""What every `outbox-bridge` command shares: the common options, the configuration they load, asking for
confirmation, and printing a result as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def options(parser: argparse.ArgumentParser, *, json_output: bool = False, nested: bool = False) -> None:
    """The options every command takes (and `--json`). `nested`: for the actions of a command that has them,
    so the options work after the action too without undoing what was given before it."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if nested else {}
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file (also OUTBOX_CONFIG_FILE)",
                        **default)
    parser.add_argument("--db-url", dest="db_url", help="SQLAlchemy URL of the outbox database (OUTBOX_DB_URL)",
                        **default)
    parser.add_argument("--bootstrap-servers", dest="bootstrap_servers",
                        help="Kafka bootstrap servers (KAFKA_BOOTSTRAP_SERVERS)", **default)
    parser.add_argument("--bridge-name", dest="bridge_name", help="bridge name, one watermark each (BRIDGE_NAME)",
                        **default)
    parser.add_argument("--topic-template", dest="topic_template",
                        help="topic per aggregate type, e.g. outbox.event.{aggregate_type} (BRIDGE_TOPIC_TEMPLATE)",
                        **default)
    if json_output:
        parser.add_argument("--json", action="store_true", help="machine-readable output", **default)


def config(args: argparse.Namespace) -> Any:
    from bridge.config import load_config

    flags = {k: getattr(args, k, None) for k in ("db_url", "bootstrap_servers", "bridge_name", "topic_template",
                                                  "max_in_flight", "metrics_port", "poison_policy",
                                                  "allow_single_broker", "retention", "start_from",
                                                  "topic_retention")}
    return load_config(flags=flags, toml_path=args.config)


def confirm(question: str, assume_yes: bool) -> None:
    from bridge.errors import RefusedError

    if assume_yes:
        return
    if not sys.stdin.isatty():
        raise RefusedError(f"{question} Refusing without a terminal to ask; pass --yes to confirm")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise RefusedError("not confirmed; nothing changed")


def report(result: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=False)
    for key, value in result.items():
        table.add_row(key.replace("_", " "), "-" if value is None else str(value))
    Console().print(table)
