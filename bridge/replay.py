"""`outbox-bridge replay`: publish events again, by rewinding the running bridge or as a range.

Every request that could lose or confuse events is refused, with a message that says what to do: a
range above the watermark, a range below what cleanup already deleted (`bridge.store.maintenance`),
a rewind while the daemon does not answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from sqlalchemy import and_, func, select, update
from sqlalchemy.engine import Connection, Engine

from bridge.config import BridgeConfig
from bridge.core.records import OutboxRow
from bridge.errors import OutboxError, RefusedError
from bridge.schema import bridge_offsets, bridge_replay_audit, domain_events
from bridge.store.audit import audit
from bridge.store.deletable import hold_offsets
from bridge.store.engine import make_engine
from bridge.store.offsets import OffsetStore
from bridge.store.rows import ROW_COLUMNS

console = Console(stderr=True)


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    from_seq: int
    to_seq: int | None
    aggregate_type: str | None
    event_type: str | None
    mode: str
    topic: str | None
    reason: str | None
    dry_run: bool
    #: Range mode: only these seqs (`outbox-bridge dead-letters republish`).
    seqs: tuple[int, ...] = ()


def _filters(request: ReplayRequest, upper: int) -> Any:
    conditions = [domain_events.c.seq >= request.from_seq, domain_events.c.seq <= upper]
    if request.aggregate_type:
        conditions.append(domain_events.c.aggregate_type == request.aggregate_type)
    if request.event_type:
        conditions.append(domain_events.c.event_type == request.event_type)
    if request.seqs:
        conditions.append(domain_events.c.seq.in_(request.seqs))
    return and_(*conditions)


def plan_replay(config: BridgeConfig, request: ReplayRequest) -> dict[str, Any]:
    """Check a replay request against the watermark and retention; return what it would publish."""
    if request.from_seq < 1:
        raise RefusedError(f"--from-seq {request.from_seq} is not a seq; seqs start at 1")
    if request.to_seq is not None and request.to_seq < request.from_seq:
        raise RefusedError(f"--to-seq {request.to_seq} is below --from-seq {request.from_seq}; swap them")
    if request.mode == "rewind" and (request.aggregate_type or request.event_type or request.topic):
        raise RefusedError(
            "a rewind re-publishes everything from --from-seq through the live bridge, so it takes no filters "
            "or topic; use --mode range to publish a filtered range without touching the watermark"
        )
    engine = make_engine(config.db_url.get_secret_value())
    try:
        offsets = OffsetStore(engine, config.bridge_name).read()
        watermark = offsets.watermark if offsets else 0
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
            where = _filters(request, upper)
            count = int(conn.execute(select(func.count()).where(where)).scalar() or 0)
            types = [r[0] for r in conn.execute(select(domain_events.c.aggregate_type).where(where).distinct())]
        topics = [request.topic] if request.topic else sorted(config.topic_for(t) for t in types)
        return {"bridge_name": config.bridge_name, "mode": request.mode, "from_seq": request.from_seq,
                "to_seq": upper, "events": count, "topics": topics, "watermark": watermark,
                "active_instance": offsets.owner if offsets and _lease_active(offsets) else None}
    finally:
        engine.dispose()


def _lease_active(offsets: Any) -> bool:
    return bool(offsets.owner and offsets.lease_expires_at and offsets.lease_expires_at > datetime.now(UTC))


def _audit(engine: Engine, config: BridgeConfig, request: ReplayRequest, status: str, upper: int | None) -> int:
    with engine.begin() as conn:
        return _audit_in(conn, config, request, status, upper)


def _audit_in(conn: Connection, config: BridgeConfig, request: ReplayRequest, status: str,
              upper: int | None) -> int:
    """Insert the audit row in `conn`'s transaction; return its id."""
    filters = {k: v for k, v in {"aggregate_type": request.aggregate_type, "event_type": request.event_type,
                                 "topic": request.topic}.items() if v}
    return audit(conn, config.bridge_name, request.mode, request.from_seq, upper, status=status,
                 reason=request.reason, filters=filters)


def rewind(config: BridgeConfig, request: ReplayRequest, wait_s: float = 60.0) -> dict[str, Any]:
    """Move the bridge back so it re-publishes from `from_seq`: through the daemon if one leads, else directly."""
    plan = plan_replay(config, request)
    engine = make_engine(config.db_url.get_secret_value())
    try:
        # Pending from here on, so cleanup keeps every row from from_seq up until the rewind is done.
        audit_id = _request_rewind(engine, config, request)
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
            raise RefusedError(
                f"the running bridge {plan['active_instance']} did not pick the rewind up within {wait_s:.0f}s; "
                "nothing changed. Check that it is healthy (outbox-bridge status) and retry, or stop it first"
            )
        OffsetStore(engine, config.bridge_name).set_watermark(request.from_seq - 1)
        with engine.begin() as conn:
            conn.execute(update(bridge_replay_audit).where(bridge_replay_audit.c.id == audit_id,
                                                           bridge_replay_audit.c.status == "pending")
                         .values(status="applied", applied_at=datetime.now(UTC)))
        return plan | {"audit_id": audit_id, "applied_by": "outbox-bridge replay (bridge stopped)"}
    finally:
        engine.dispose()


def _request_rewind(engine: Engine, config: BridgeConfig, request: ReplayRequest) -> int:
    """Record a pending rewind, after checking again, holding the offsets row against a cleanup batch,
    that every row it re-publishes is still there; refuse (nothing recorded) if cleanup got there first."""
    with engine.begin() as conn:
        hold_offsets(conn, config.bridge_name)
        watermark = conn.execute(select(bridge_offsets.c.watermark)
                                 .where(bridge_offsets.c.bridge_name == config.bridge_name)).scalar()
        lowest = conn.execute(select(func.min(domain_events.c.seq))).scalar()
        # With the outbox empty, everything up to the watermark was deleted.
        oldest_kept = int(lowest) if lowest is not None else int(watermark or 0) + 1
        if request.from_seq < oldest_kept:
            raise RefusedError(
                f"--from-seq {request.from_seq} is below the oldest event still in the outbox (seq {oldest_kept}); "
                f"cleanup deleted the rows before it (possibly just now), so the rewind would replay less than "
                f"asked. Nothing changed: start at --from-seq {oldest_kept} or later"
            )
        return _audit_in(conn, config, request, "pending", None)


def publish_range(config: BridgeConfig, request: ReplayRequest, show_progress: bool = True) -> dict[str, Any]:
    """Publish a seq range to its topics (or one named topic) without touching the live watermark."""
    from bridge.core.records import DEFAULT_MAX_MESSAGE_BYTES, build_record
    from bridge.daemon.poison import producer_limit
    from bridge.errors import PoisonEventError
    from bridge.kafka.access import check_connection
    from bridge.kafka.producer_settings import producer_settings
    from bridge.kafka.publisher import KafkaPublisher
    from bridge.kafka.topics import TopicGuard, TopicPolicy

    plan = plan_replay(config, request)
    check_connection(config.kafka.client_conf())  # refused credentials or certificate: one clear error, now
    engine = make_engine(config.db_url.get_secret_value())
    failures: list[str] = []
    delivered = 0

    def on_delivery(seq: int, _generation: int, err: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failures.append(f"seq {seq}: {err.str()}")

    def route(aggregate_type: str) -> str:
        return request.topic or config.topic_for(aggregate_type)

    # Each record is checked against its topic's own limit, as the daemon does, so an event its topic now
    # takes (a dead letter after max.message.bytes was raised) is sent whole, and one it refuses is named.
    guard = TopicGuard(config.kafka.client_conf(), TopicPolicy(config.topic_partitions, config.replication_factor,
                                                              config.allow_single_broker))
    most = producer_limit(config.producer_extra)
    limits = {topic: min(guard.check(topic).max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES, most)
              for topic in plan["topics"]}

    publisher = KafkaPublisher(producer_settings(config.producer, client_id=f"outbox-replay-{config.bridge_name}").conf,
                               on_delivery)
    try:
        with _progress(show_progress) as progress:
            task = progress.add_task("replaying", total=plan["events"])
            after = request.from_seq - 1
            while True:
                with engine.connect() as conn:
                    batch = [OutboxRow.from_mapping(r) for r in conn.execute(
                        select(*ROW_COLUMNS).where(_filters(request, plan["to_seq"]), domain_events.c.seq > after)
                        .order_by(domain_events.c.seq).limit(1000)).mappings()]
                if not batch:
                    break
                for row in batch:
                    try:
                        record = build_record(row, route, _limit_for(row.aggregate_type, route, limits, most))
                    except PoisonEventError as exc:
                        failures.append(f"seq {row.seq}: {exc.reason}")
                        continue
                    publisher.send(record, 0)
                    publisher.poll(0)
                after = batch[-1].seq
                progress.update(task, advance=len(batch))
            remaining = publisher.flush(config.delivery_timeout_ms / 1000)
        if remaining or failures or publisher.failure:
            raise OutboxError(
                f"range replay incomplete: {delivered} of {plan['events']} delivered, {remaining} unsent, "
                f"errors: {failures[:3] or publisher.failure}; the live watermark is untouched, retry the command"
            )
        audit_id = _audit(engine, config, request, "done", plan["to_seq"])
        return plan | {"audit_id": audit_id, "delivered": delivered}
    finally:
        # Everything was flushed above (or the command failed): finish the producer and its threads now.
        publisher.close(0)
        engine.dispose()


def _limit_for(aggregate_type: str, route: Any, limits: dict[str, int], most: int) -> int:
    try:
        return limits.get(route(aggregate_type), most)
    except ValueError:  # unroutable: build_record says so
        return most


def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console, disable=not enabled)
