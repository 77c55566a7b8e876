"""Maintenance of the outbox table: deleting published rows (`outbox-bridge cleanup`, and retention while
leading), never a row some bridge name has not published, a pending rewind will publish again, or an open
dead letter still needs (`bridge.store.deletable`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from sqlalchemy import and_, delete, func, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from bridge.config import DatabaseSection
from bridge.config import parse_duration as config_duration
from bridge.errors import RefusedError
from bridge.schema import as_utc, domain_events
from bridge.store.audit import requester
from bridge.store.deletable import deletable, hold_offsets, kept_rows, no_open_dead_letter, record_deletion
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore

console = Console(stderr=True)


def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console, disable=not enabled)


def parse_duration(text: str) -> timedelta:
    """`--older-than`: a duration like 90m, 12h or 7d; RefusedError naming the value otherwise."""
    try:
        return config_duration(text)
    except ValueError:
        raise RefusedError(
            f"--older-than {text!r} is not a duration; use a number and a unit, e.g. 90m, 12h, 7d"
        ) from None


def cleanup(database: DatabaseSection, older_than: timedelta, dry_run: bool, batch_size: int = 1000,
            show_progress: bool = True, deleted_by: str | None = None) -> dict[str, Any]:
    """Delete rows older than `older_than` that every registered bridge name has published, in small batches,
    keeping every row a pending rewind will re-publish and every row with an open dead letter; each batch
    is recorded in `bridge_deletions` in its own transaction."""
    engine = make_engine(database.url_text)
    cutoff = datetime.now(UTC) - older_than
    name = database.bridge_name
    by = deleted_by or f"outbox-bridge cleanup by {requester()} (bridge {name!r})"
    try:
        offsets = OffsetStore(engine, name).read()
        watermark = offsets.watermark if offsets else 0
        with engine.connect() as conn:
            plan = deletable(conn, name)
            total = _count(conn, and_(domain_events.c.seq <= plan.limit, domain_events.c.occurred_at < cutoff,
                                      no_open_dead_letter()))
            kept = _count(conn, kept_rows(plan.limit, cutoff))
            held = _held_back(conn, plan.limit, watermark, cutoff) if plan.held_back_by else None
        result = {"bridge_name": name, "watermark": watermark, "cutoff": cutoff.isoformat(),
                  "kept_for_rewind_from": plan.rewind_from, "kept_for_dead_letters": kept,
                  "held_back_by": plan.held_back_by, "held_back_at": plan.held_back_at,
                  "held_back_rows": held[0] if held else 0,
                  "held_back_for_s": round(held[1], 1) if held else 0.0,
                  "rows": total, "dry_run": dry_run, "deleted": 0}
        if dry_run or total == 0:
            return result
        deleted = 0
        run: int | None = None
        with _progress(show_progress) as progress:
            task = progress.add_task("deleting", total=total)
            while True:
                with engine.begin() as conn:
                    # Decide and delete under every name's offsets row, batch by batch: a rewind requested or
                    # applied meanwhile, or a watermark that moved, is seen here, and one requested during this
                    # batch waits for it and then sees what it deleted (replay._request_rewind).
                    hold_offsets(conn)
                    limit = min(plan.limit, deletable(conn, name).limit)
                    seqs = [r[0] for r in conn.execute(
                        select(domain_events.c.seq).where(domain_events.c.seq <= limit,
                                                          domain_events.c.occurred_at < cutoff, no_open_dead_letter())
                        .order_by(domain_events.c.seq).limit(batch_size))]
                    if not seqs:
                        break
                    conn.execute(delete(domain_events).where(domain_events.c.seq.in_(seqs)))
                    run = record_deletion(conn, run, by, seqs, datetime.now(UTC))
                deleted += len(seqs)
                progress.update(task, advance=len(seqs))
        return result | {"deleted": deleted}
    finally:
        engine.dispose()


def _count(conn: Connection, where: ColumnElement[bool]) -> int:
    return int(conn.execute(select(func.count()).where(where)).scalar() or 0)


def _held_back(conn: Connection, limit: int, watermark: int, cutoff: datetime) -> tuple[int, float]:
    """Rows old enough that this name has published but another holds back: how many, and for how long the
    oldest of them has been due (seconds since it passed the cutoff)."""
    where = and_(domain_events.c.seq > limit, domain_events.c.seq <= watermark, domain_events.c.occurred_at < cutoff,
                 no_open_dead_letter())
    count, oldest = conn.execute(select(func.count(), func.min(domain_events.c.occurred_at)).where(where)).one()
    if not count or oldest is None:
        return 0, 0.0
    return int(count), max(0.0, (cutoff - as_utc(oldest)).total_seconds())
