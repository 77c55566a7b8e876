"""What `outbox-bridge status` and `outbox-bridge topics` report, as plain data first, then rendered."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from bridge.config import BridgeConfig, DatabaseSection, TopicSection
from bridge.exits import EXIT_OK, EXIT_UNSAFE
from bridge.kafka.access import check_connection
from bridge.kafka.progress import ProgressTopic
from bridge.kafka.topic_history import describe_bytes, describe_ms
from bridge.kafka.topics import TopicGuard, TopicReport
from bridge.store import dead_letters, instances
from bridge.store.deletable import deletable, deleted_above
from bridge.store.engine import make_engine, make_reader
from bridge.store.failures import store_error
from bridge.store.offsets import OffsetStore


def collect_status(database: DatabaseSection) -> dict[str, Any]:
    """The bridge's state from the database: watermark, head, lag, lease, the daemon's last report."""
    engine = make_engine(database.url_text)
    try:
        row = OffsetStore(engine, database.bridge_name).read()
        watermark = row.watermark if row else 0
        source = make_reader(engine)
        head = source.head_seq()
        oldest = source.oldest_after(watermark)
        now = datetime.now(UTC)
        lease_active = bool(row and row.owner and row.lease_expires_at and row.lease_expires_at > now)
        reported = row.status if row else {}
        kept = _kept(engine, database.bridge_name, watermark, now)
        return {
            "bridge_name": database.bridge_name,
            "watermark": watermark,
            "head_seq": head,
            "lag_events": max(0, head - watermark),
            "lag_seconds": round((now - oldest.occurred_at).total_seconds(), 3) if oldest else 0.0,
            "in_flight": reported.get("in_flight", 0) if lease_active else 0,
            "active_instance": row.owner if lease_active and row else None,
            "leading_since": reported.get("leading_since") if lease_active else None,
            "delivery": reported.get("delivery") if lease_active else None,
            "epoch": row.epoch if row else 0,
            "lease_expires_at": row.lease_expires_at.isoformat() if row and row.lease_expires_at else None,
            "heartbeat_at": row.heartbeat_at.isoformat() if row and row.heartbeat_at else None,
            "horizon_holder": reported.get("horizon_holder"),
            "holes_settled": reported.get("holes_settled"),
            "last_error": reported.get("last_error"),
            "halted_at_seq": reported.get("halted_at_seq"),
            "retired_at": row.retired_at.isoformat(timespec="seconds") if row and row.retired_at else None,
            **kept,
        }
    finally:
        engine.dispose()


def _kept(engine: Engine, name: str, watermark: int, now: datetime) -> dict[str, Any]:
    """What the outbox keeps for whom: open dead letters, the name holding retention back, and rows this name
    needed that cleanup deleted (it then refuses to lead)."""
    try:
        with engine.connect() as conn:
            letters = dead_letters.open_summary(conn, name)
            running = instances.listed(conn, name)
            limit = deletable(conn, name)
            gone = deleted_above(conn, watermark)
    except DBAPIError as exc:
        raise store_error(exc, "reading dead letters, retention and deletions") from exc
    return {
        "dead_letters_open": letters.count,
        "oldest_dead_letter_age_s": round((now - letters.oldest_at).total_seconds()) if letters.oldest_at else None,
        "retention_held_back_by": (
            {"bridge_name": limit.held_back_by, "up_to_seq": limit.held_back_at} if limit.held_back_by else None),
        "rows_gone_above_watermark": gone.describe() if gone is not None else None,
        "instances": running,
    }


def render_status(status: dict[str, Any]) -> None:
    table = Table(title=f"outbox bridge {status['bridge_name']!r}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    for key, value in status.items():
        if key == "bridge_name":
            continue
        shown = json.dumps(value, default=str) if isinstance(value, dict) else ("-" if value is None else str(value))
        table.add_row(key.replace("_", " "), shown)
    Console().print(table)


def topics_command(config: BridgeConfig, action: str, as_json: bool, extra_topics: list[str]) -> int:
    """Check (or ensure) every topic the bridge writes: one per aggregate type in the outbox, plus the DLQ, and in
    exactly-once delivery its progress topic (compacted, one partition: `bridge.kafka.progress`).

    `ensure` creates a missing topic (when allowed), fixes what is unsafe and lengthens a retention shorter than
    BRIDGE_TOPIC_RETENTION; it never shortens one. A finite history is a warning: exit 0, unless a topic is
    unsafe (exit 4)."""
    check_connection(config.kafka.client_conf())  # refused credentials or certificate: one clear error, now
    guard = TopicGuard(config.kafka.client_conf(), config.topics.policy())
    topics = sorted(set(_event_topics(config.database, config.topics)) | set(extra_topics) | {config.dlq_topic_name})
    reports = []
    for topic in topics:
        report = guard.check(topic)
        if action == "ensure":
            if not report.exists and config.allow_create_topics:
                guard.create(topic)
                report = guard.settle(topic)
            elif report.exists and guard.fixes(report):
                guard.fix(report)
                report = guard.settle(topic)
        reports.append(report)
    transactions = config.transactions
    if transactions is not None:
        progress = ProgressTopic(config.kafka.client_conf(), config.topics.policy(), transactions.progress_topic,
                                 config.allow_create_topics)
        reports.append(progress.inspect(create=action == "ensure"))
    unsafe = [r for r in reports if not r.safe]
    if as_json:
        print(json.dumps([asdict(r) | {"problems": [str(p) for p in r.problems], "safe": r.safe} for r in reports],
                         indent=2, default=str))
    else:
        table = Table(title="bridge topics")
        for column in ("topic", "partitions", "rf", "min isr", "unclean", "retention", "verdict"):
            table.add_column(column)
        for r in reports:
            verdict = "ok" if r.safe else "; ".join(map(str, r.problems))
            if r.safe and r.history is not None:
                verdict = "warning: finite history (below)"
            table.add_row(r.topic, str(r.partitions), str(r.replication_factor), str(r.min_insync_replicas),
                          str(r.unclean_leader_election), _retention(r), verdict)
        console = Console()
        console.print(table)
        for r in reports:
            if r.history is not None:
                console.print(f"warning: {r.history.summary}\n  fix: {r.history.fix}", markup=False, highlight=False)
    return EXIT_UNSAFE if unsafe else EXIT_OK


def _retention(report: TopicReport) -> str:
    retention = report.retention
    if retention is None:
        return "-"
    if retention.keeps_every_record:
        return "forever"
    parts = [describe_ms(retention.ms)] if retention.ms >= 0 else []
    parts += [describe_bytes(retention.bytes)] if retention.bytes >= 0 else []
    parts += ["compacted"] if retention.compacted else []
    return ", ".join(parts)


def _event_topics(database: DatabaseSection, topics: TopicSection) -> list[str]:
    from sqlalchemy import select
    from sqlalchemy.exc import DBAPIError

    from bridge.schema import domain_events
    from bridge.store.failures import store_error

    engine = make_engine(database.url_text)
    try:
        with engine.connect() as conn:
            types = [r[0] for r in conn.execute(select(domain_events.c.aggregate_type).distinct())]
    except DBAPIError as exc:  # e.g. never migrated: "not migrated, run `outbox-bridge migrate`", exit 2
        raise store_error(exc, "reading the aggregate types of domain_events") from exc
    finally:
        engine.dispose()
    return [topics.topic_for(t) for t in types]
