"""`outbox-bridge replay`: publish events again, by rewinding the running bridge or as a range.

A replay starts at a seq or a time (`--from-time`, the first seq whose `occurred_at` is at or after it), and
a range can be narrowed to aggregate types, event types, aggregate ids or a time window and sent to a topic
of its own (`bridge.replay_range`). Every request that could lose or confuse events is refused, with a
message that says what to do: a range above the watermark, a range below what cleanup already deleted
(`bridge.store.maintenance`), a rewind while the daemon does not answer, a target topic that is missing
and may not be created, or unsafe. Every attempt is audited in `bridge_replay_audit` with its outcome:
applied or done, refused, or failed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from sqlalchemy import and_, func, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from bridge.config import BridgeConfig, DatabaseSection
from bridge.errors import ConfigurationError, OutboxError, RefusedError, TopicSafetyError
from bridge.schema import bridge_offsets, bridge_replay_audit, domain_events
from bridge.store.audit import audit
from bridge.store.deletable import hold_offsets
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore

console = Console(stderr=True)


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    #: Where it starts: a seq, or (with `from_time`) None until `plan_replay` resolves the time to a seq.
    from_seq: int | None
    to_seq: int | None
    aggregate_type: str | None
    event_type: str | None
    mode: str
    topic: str | None
    reason: str | None
    dry_run: bool
    #: Range mode: only these seqs (`outbox-bridge dead-letters republish`).
    seqs: tuple[int, ...] = ()
    #: `--from-time` / `--to-time` on `occurred_at` (aware datetimes); a range keeps to the window.
    from_time: datetime | None = None
    to_time: datetime | None = None
    #: Range mode: only these aggregates (`--aggregate-id`, repeatable).
    aggregate_ids: tuple[str, ...] = ()

    def filters(self) -> dict[str, Any]:
        """What narrows the replay, for the audit row."""
        found = {"aggregate_type": self.aggregate_type, "event_type": self.event_type, "topic": self.topic,
                 "aggregate_ids": list(self.aggregate_ids[:100]), "seqs": list(self.seqs[:1000]),
                 "from_time": self.from_time.isoformat() if self.from_time else None,
                 "to_time": self.to_time.isoformat() if self.to_time else None}
        return {key: value for key, value in found.items() if value}


def parse_time(flag: str, text: str) -> datetime:
    """`--from-time` / `--to-time`: ISO 8601 with its UTC offset (as `outbox-projections replay` takes a time),
    or `ts:<epoch ms>`; RefusedError naming the forms otherwise."""
    value = text.strip()
    if value.startswith("ts:") and value[3:].isdigit():
        return datetime.fromtimestamp(int(value[3:]) / 1000, UTC)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise RefusedError(f"{flag} {text!r} is not a time: use ISO 8601 with its offset, e.g. "
                           "2026-11-26T14:00:00Z or 2026-11-26T15:00:00+01:00, or ts:<epoch ms>") from None
    if moment.tzinfo is None:
        raise RefusedError(f"{flag} {text!r} has no UTC offset; write it as {value}Z (UTC) or with +HH:MM")
    return moment.astimezone(UTC)


def _filters(request: ReplayRequest, from_seq: int, upper: int) -> Any:
    conditions = [domain_events.c.seq >= from_seq, domain_events.c.seq <= upper]
    if request.aggregate_type:
        conditions.append(domain_events.c.aggregate_type == request.aggregate_type)
    if request.event_type:
        conditions.append(domain_events.c.event_type == request.event_type)
    if request.seqs:
        conditions.append(domain_events.c.seq.in_(request.seqs))
    if request.aggregate_ids:
        conditions.append(domain_events.c.aggregate_id.in_(request.aggregate_ids))
    if request.mode == "range" and request.from_time is not None:
        conditions.append(domain_events.c.occurred_at >= request.from_time)
    if request.mode == "range" and request.to_time is not None:
        conditions.append(domain_events.c.occurred_at <= request.to_time)
    return and_(*conditions)


def _check_shape(request: ReplayRequest) -> None:
    if (request.from_seq is None) == (request.from_time is None):
        raise RefusedError("give where the replay starts: --from-seq SEQ or --from-time TIME (one of them)")
    if request.to_seq is not None and request.to_time is not None:
        raise RefusedError("give where the range ends once: --to-seq or --to-time, not both")
    if request.from_seq is not None and request.from_seq < 1:
        raise RefusedError(f"--from-seq {request.from_seq} is not a seq; seqs start at 1")
    if request.from_seq is not None and request.to_seq is not None and request.to_seq < request.from_seq:
        raise RefusedError(f"--to-seq {request.to_seq} is below --from-seq {request.from_seq}; swap them")
    if request.from_time and request.to_time and request.to_time < request.from_time:
        raise RefusedError(f"--to-time {request.to_time.isoformat()} is before --from-time "
                           f"{request.from_time.isoformat()}; swap them")
    if request.mode == "rewind" and (request.aggregate_type or request.event_type or request.topic
                                     or request.aggregate_ids or request.to_time or request.to_seq):
        raise RefusedError(
            "a rewind re-publishes everything from --from-seq (or --from-time) through the live bridge, so it "
            "takes no filters, end or topic; use --mode range to publish a filtered range without touching the "
            "watermark"
        )


def _resolve_times(conn: Connection, request: ReplayRequest) -> tuple[int, int | None, dict[str, Any]]:
    """The seqs `--from-time` and `--to-time` stand for: the first seq at or after the start, the last at or
    before the end; and what the plan says about it."""
    events = domain_events
    from_seq, to_seq, said = request.from_seq, request.to_seq, {}
    if request.from_time is not None:
        first = conn.execute(select(func.min(events.c.seq)).where(events.c.occurred_at >= request.from_time)).scalar()
        if first is None:
            raise RefusedError(f"no event in the outbox occurred at or after --from-time "
                               f"{request.from_time.isoformat()}; nothing to replay")
        from_seq = int(first)
        said["from_time_resolved"] = f"{request.from_time.isoformat()} -> seq {from_seq}"
    if request.to_time is not None:
        last = conn.execute(select(func.max(events.c.seq)).where(events.c.occurred_at <= request.to_time)).scalar()
        if last is None or int(last) < (from_seq or 0):
            raise RefusedError(f"no event in the outbox occurred between the start and --to-time "
                               f"{request.to_time.isoformat()}; nothing to replay")
        to_seq = int(last)
        said["to_time_resolved"] = f"{request.to_time.isoformat()} -> seq {to_seq}"
    assert from_seq is not None
    return from_seq, to_seq, said


def plan_replay(config: BridgeConfig, request: ReplayRequest) -> dict[str, Any]:
    """Check a replay request against the watermark and retention; return what it would publish (from_seq and
    to_seq as resolved from the times given)."""
    _check_shape(request)
    engine = make_engine(config.db_url.get_secret_value())
    try:
        offsets = OffsetStore(engine, config.bridge_name).read()
        watermark = offsets.watermark if offsets else 0
        with engine.connect() as conn:
            from_seq, to_seq, said = _resolve_times(conn, request)
        request = replace(request, from_seq=from_seq, to_seq=to_seq)
        assert request.from_seq is not None
        if request.from_seq > watermark:
            raise RefusedError(
                f"--from-seq {request.from_seq} is above the watermark {watermark} of bridge "
                f"{config.bridge_name!r}: those events are not published yet, so there is nothing to replay"
            )
        upper = min(request.to_seq if request.to_seq is not None else watermark, watermark)
        if request.to_seq is not None and request.to_seq > watermark:
            raise RefusedError(
                f"--to-seq {request.to_seq} is above the watermark {watermark}: the live bridge has not published "
                f"those yet; use --to-seq {watermark} or wait for it"
            )
        with engine.connect() as conn:
            lowest = conn.execute(select(func.min(domain_events.c.seq))).scalar()
            if lowest is not None and request.from_seq < int(lowest) and request.from_seq <= upper:
                raise RefusedError(
                    f"--from-seq {request.from_seq} is below the oldest event still in the outbox (seq {lowest}); "
                    f"cleanup already deleted the rest, so start at --from-seq {lowest} or later"
                )
            where = _filters(request, request.from_seq, upper)
            count = int(conn.execute(select(func.count()).where(where)).scalar() or 0)
            types = [r[0] for r in conn.execute(select(domain_events.c.aggregate_type).where(where).distinct())]
        topics = [request.topic] if request.topic else sorted(config.topic_for(t) for t in types)
        return {"bridge_name": config.bridge_name, "mode": request.mode, "from_seq": request.from_seq,
                "to_seq": upper, **said, "events": count, "topics": topics, "watermark": watermark,
                "active_instance": offsets.owner if offsets and _lease_active(offsets) else None}
    finally:
        engine.dispose()


def _lease_active(offsets: Any) -> bool:
    return bool(offsets.owner and offsets.lease_expires_at and offsets.lease_expires_at > datetime.now(UTC))


def _audit(engine: Engine, bridge_name: str, request: ReplayRequest, status: str, upper: int | None) -> int:
    with engine.begin() as conn:
        return _audit_in(conn, bridge_name, request, status, upper)


def _audit_in(conn: Connection, bridge_name: str, request: ReplayRequest, status: str,
              upper: int | None, reason: str | None = None) -> int:
    """Insert the audit row in `conn`'s transaction; return its id."""
    return audit(conn, bridge_name, request.mode, request.from_seq or 0, upper, status=status,
                 reason=reason if reason is not None else request.reason, filters=request.filters())


@contextmanager
def audited(database: DatabaseSection, request: ReplayRequest) -> Iterator[None]:
    """Record an attempt that was refused or failed, with why (one that succeeds records itself)."""
    try:
        yield
    except (RefusedError, ConfigurationError, TopicSafetyError) as exc:
        _record_outcome(database, request, "refused", exc)
        raise
    except OutboxError as exc:
        _record_outcome(database, request, "failed", exc)
        raise


def _record_outcome(database: DatabaseSection, request: ReplayRequest, status: str, exc: OutboxError) -> None:
    if getattr(exc, "audited", False):
        return
    why = f"{request.reason} [{status}: {exc}]" if request.reason else f"[{status}: {exc}]"
    try:
        engine = make_engine(database.url_text)
        try:
            with engine.begin() as conn:
                _audit_in(conn, database.bridge_name, request, status, request.to_seq, reason=why[:4000])
        finally:
            engine.dispose()
    except (OutboxError, DBAPIError) as failed:  # the database itself may be why: the error is reported anyway
        console.print(f"could not record the {status} attempt in bridge_replay_audit: {failed}")


def rewind(config: BridgeConfig, request: ReplayRequest, wait_s: float = 60.0) -> dict[str, Any]:
    """Move the bridge back so it re-publishes from `from_seq`: through the daemon if one leads, else directly."""
    plan = plan_replay(config, request)
    request = replace(request, from_seq=plan["from_seq"])
    engine = make_engine(config.db_url.get_secret_value())
    try:
        # Pending from here on, so cleanup keeps every row from from_seq up until the rewind is done.
        audit_id = _request_rewind(engine, config.bridge_name, request)
        if plan["active_instance"]:
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                with engine.connect() as conn:
                    status = conn.execute(select(bridge_replay_audit.c.status)
                                          .where(bridge_replay_audit.c.id == audit_id)).scalar()
                if status == "applied":
                    return plan | {"audit_id": audit_id, "applied_by": plan["active_instance"]}
                time.sleep(0.2)
            with engine.begin() as conn:
                conn.execute(update(bridge_replay_audit).where(bridge_replay_audit.c.id == audit_id,
                                                               bridge_replay_audit.c.status == "pending")
                             .values(status="refused", reason=(request.reason or "") + " [not picked up in time]"))
            refused = RefusedError(
                f"the running bridge {plan['active_instance']} did not pick the rewind up within {wait_s:.0f}s; "
                "nothing changed. Check that it is healthy (outbox-bridge status) and retry, or stop it first"
            )
            refused.audited = True  # type: ignore[attr-defined]  # its pending row says so already
            raise refused
        assert request.from_seq is not None
        OffsetStore(engine, config.bridge_name).set_watermark(request.from_seq - 1)
        with engine.begin() as conn:
            conn.execute(update(bridge_replay_audit).where(bridge_replay_audit.c.id == audit_id,
                                                           bridge_replay_audit.c.status == "pending")
                         .values(status="applied", applied_at=datetime.now(UTC)))
        return plan | {"audit_id": audit_id, "applied_by": "outbox-bridge replay (bridge stopped)"}
    finally:
        engine.dispose()


def _request_rewind(engine: Engine, bridge_name: str, request: ReplayRequest) -> int:
    """Record a pending rewind, after checking again, holding the offsets row against a cleanup batch,
    that every row it re-publishes is still there; refuse (nothing recorded) if cleanup got there first."""
    with engine.begin() as conn:
        hold_offsets(conn, bridge_name)
        watermark = conn.execute(select(bridge_offsets.c.watermark)
                                 .where(bridge_offsets.c.bridge_name == bridge_name)).scalar()
        lowest = conn.execute(select(func.min(domain_events.c.seq))).scalar()
        # With the outbox empty, everything up to the watermark was deleted.
        oldest_kept = int(lowest) if lowest is not None else int(watermark or 0) + 1
        assert request.from_seq is not None
        if request.from_seq < oldest_kept:
            raise RefusedError(
                f"--from-seq {request.from_seq} is below the oldest event still in the outbox (seq {oldest_kept}); "
                f"cleanup deleted the rows before it (possibly just now), so the rewind would replay less than "
                f"asked. Nothing changed: start at --from-seq {oldest_kept} or later"
            )
        return _audit_in(conn, bridge_name, request, "pending", None)
