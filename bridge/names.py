"""`outbox-bridge names`: every bridge name registered on the outbox, and retiring one on purpose.

Several names on one outbox publish it to several Kafka clusters (disaster recovery, analytics, a move to a
new cluster), one watermark and one lease each. Retention deletes only what every registered name has
published, so a name that no longer runs holds it back: it is reported here, in `doctor` and by the
OutboxRetentionHeldBack alert, never dropped silently. `names retire NAME --reason ...` (audited) makes it
hold nothing back; a retired name leads again only with `--start-from`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import DBAPIError

from bridge.config import DatabaseSection
from bridge.errors import RefusedError
from bridge.schema import as_utc, bridge_offsets, domain_events
from bridge.store.audit import audit
from bridge.store.deletable import deletable, hold_offsets
from bridge.store.engine import make_engine
from bridge.store.failures import store_error
from bridge.store.offsets import OffsetRow, OffsetStore


def _last_activity(row: OffsetRow) -> datetime | None:
    return row.heartbeat_at or row.updated_at


def describe(row: OffsetRow, head: int, now: datetime, stale_after: timedelta, holds_retention: bool) -> dict[str, Any]:
    """One name as `names` (and `doctor`) report it."""
    active = bool(row.owner and row.lease_expires_at and row.lease_expires_at > now)
    last = _last_activity(row)
    idle = (now - last) if last is not None else None
    never_led_or_long_ago = row.heartbeat_at is None or (idle is not None and idle > stale_after)
    stale = row.retired_at is None and not active and never_led_or_long_ago
    return {
        "bridge_name": row.bridge_name,
        "watermark": row.watermark,
        "lag_events": max(0, head - row.watermark),
        "active_instance": row.owner if active else None,
        "last_lease_holder": row.owner or row.status.get("instance"),
        "last_led_at": row.heartbeat_at.isoformat(timespec="seconds") if row.heartbeat_at else None,
        "idle_s": round(idle.total_seconds()) if idle is not None else None,
        "holds_retention_back": holds_retention,
        "not_led_for_long": stale,
        "retired_at": row.retired_at.isoformat(timespec="seconds") if row.retired_at else None,
        "retired_reason": row.retired_reason,
        "last_error": row.status.get("last_error"),
    }


def list_names(database: DatabaseSection, stale_after: timedelta) -> list[dict[str, Any]]:
    """Every name in `bridge_offsets`, the slowest first, with what each holds back; a name that has not led
    for longer than `stale_after` (BRIDGE_RETENTION_HOLD_ALERT_AFTER) is marked as not led for long."""
    engine = make_engine(database.url_text)
    try:
        with engine.connect() as conn:
            names = [row.bridge_name for row in conn.execute(select(bridge_offsets.c.bridge_name))]
            head = int(conn.execute(select(func.max(domain_events.c.seq))).scalar() or 0)
            limit = deletable(conn, database.bridge_name).limit
        rows = [row for row in (OffsetStore(engine, name).read() for name in names) if row is not None]
    except DBAPIError as exc:
        raise store_error(exc, "reading bridge_offsets") from exc
    finally:
        engine.dispose()
    now = datetime.now(UTC)
    # The names at the lowest watermark hold retention back, when some other name has published more.
    most = max((r.watermark for r in rows if r.retired_at is None), default=0)
    described = [describe(r, head, now, stale_after, r.retired_at is None and r.watermark == limit < most)
                 for r in rows]
    return sorted(described, key=lambda d: (d["retired_at"] is not None, d["watermark"], d["bridge_name"]))


def retire(database: DatabaseSection, name: str, reason: str) -> dict[str, Any]:
    """Retire `name` so it no longer holds retention back; refused while it leads (audited either way)."""
    if not reason or not reason.strip():
        raise RefusedError("--reason is required: say why this name is retired (it is audited)")
    engine = make_engine(database.url_text)
    try:
        with engine.begin() as conn:
            hold_offsets(conn, name)
            row = conn.execute(select(bridge_offsets).where(bridge_offsets.c.bridge_name == name)).mappings().first()
            if row is None:
                raise RefusedError(f"no bridge name {name!r} on this outbox; `outbox-bridge names` lists them")
            now = datetime.now(UTC)
            if row["retired_at"] is not None:
                raise RefusedError(f"bridge name {name!r} was already retired at {row['retired_at']}")
            expires = row["lease_expires_at"]
            if row["owner"] and expires is not None and as_utc(expires) > now:
                raise RefusedError(f"bridge {name!r} is leading now ({row['owner']}): stop every instance of it "
                                   "first; nothing changed")
            conn.execute(update(bridge_offsets).where(bridge_offsets.c.bridge_name == name)
                         .values(retired_at=now, retired_reason=reason.strip()))
            audit(conn, name, "retire", int(row["watermark"]), None, status="done", reason=reason.strip())
    except DBAPIError as exc:
        raise store_error(exc, f"retiring bridge name {name!r}") from exc
    finally:
        engine.dispose()
    return {"bridge_name": name, "retired_at": now.isoformat(timespec="seconds"), "watermark": int(row["watermark"]),
            "note": "it no longer holds retention back; it leads again only with --start-from (earliest or a seq)"}
