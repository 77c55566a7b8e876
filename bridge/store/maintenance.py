"""Maintenance of the outbox table: deleting published rows (`outbox-bridge cleanup`, and retention while
leading), never a row the watermark has not passed or a pending rewind will publish again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from sqlalchemy import and_, delete, func, select

from bridge.config import DatabaseSection
from bridge.config import parse_duration as config_duration
from bridge.errors import RefusedError
from bridge.schema import domain_events
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore, deletable_up_to, hold_offsets

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
            show_progress: bool = True) -> dict[str, Any]:
    """Delete published rows (seq <= watermark) older than `older_than`, in small batches, keeping every
    row a pending rewind will re-publish (seq >= its from_seq)."""
    engine = make_engine(database.url_text)
    cutoff = datetime.now(UTC) - older_than
    name = database.bridge_name
    try:
        offsets = OffsetStore(engine, name).read()
        watermark = offsets.watermark if offsets else 0
        with engine.connect() as conn:
            planned, rewind_from = deletable_up_to(conn, name)
            where = and_(domain_events.c.seq <= planned, domain_events.c.occurred_at < cutoff)
            total = int(conn.execute(select(func.count()).where(where)).scalar() or 0)
        result = {"bridge_name": name, "watermark": watermark, "cutoff": cutoff.isoformat(),
                  "kept_for_rewind_from": rewind_from, "rows": total, "dry_run": dry_run, "deleted": 0}
        if dry_run or total == 0:
            return result
        deleted = 0
        with _progress(show_progress) as progress:
            task = progress.add_task("deleting", total=total)
            while True:
                with engine.begin() as conn:
                    # Decide and delete under the offsets row, batch by batch: a rewind requested or applied
                    # meanwhile lowers the limit here, and one requested during this batch waits for it and
                    # then sees what it deleted (_request_rewind).
                    hold_offsets(conn, name)
                    limit = min(planned, deletable_up_to(conn, name)[0])
                    seqs = [r[0] for r in conn.execute(
                        select(domain_events.c.seq).where(domain_events.c.seq <= limit,
                                                          domain_events.c.occurred_at < cutoff)
                        .order_by(domain_events.c.seq).limit(batch_size))]
                    if not seqs:
                        break
                    conn.execute(delete(domain_events).where(domain_events.c.seq.in_(seqs)))
                deleted += len(seqs)
                progress.update(task, advance=len(seqs))
        return result | {"deleted": deleted}
    finally:
        engine.dispose()
