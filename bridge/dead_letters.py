"""`outbox-bridge dead-letters`: the poison events a bridge name set aside, and what an operator does with them.

A dead letter stays open, and retention and `cleanup` keep its row (the one whole copy of the event: the
dead-letter record may be cut to fit its topic), until the operator either republishes it to its own topic
once the cause is fixed (`republish`, through the range replay, audited) or resolves it with a reason
(`resolve`, audited). Only then may retention delete the row.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import DBAPIError

from bridge.config import BridgeConfig, DatabaseSection
from bridge.errors import RefusedError
from bridge.store import dead_letters as store
from bridge.store.audit import audit, requester
from bridge.store.dead_letters import DeadLetterRow
from bridge.store.engine import make_engine
from bridge.store.failures import store_error


def list_dead_letters(database: DatabaseSection, *, every_status: bool = False) -> list[DeadLetterRow]:
    """This bridge name's open dead letters (with `every_status`, the republished and resolved ones too)."""
    statuses = store.DEAD_LETTER_STATUSES if every_status else (store.OPEN,)
    engine = make_engine(database.url_text)
    try:
        with engine.connect() as conn:
            return store.listed(conn, database.bridge_name, statuses=statuses)
    except DBAPIError as exc:
        raise store_error(exc, "reading bridge_dead_letters") from exc
    finally:
        engine.dispose()


def _open_in(database: DatabaseSection, from_seq: int, to_seq: int) -> list[DeadLetterRow]:
    if to_seq < from_seq:
        raise RefusedError(f"--to-seq {to_seq} is below SEQ {from_seq}; swap them")
    engine = make_engine(database.url_text)
    try:
        with engine.connect() as conn:
            found = store.listed(conn, database.bridge_name, from_seq=from_seq, to_seq=to_seq)
    except DBAPIError as exc:
        raise store_error(exc, "reading bridge_dead_letters") from exc
    finally:
        engine.dispose()
    if not found:
        span = f"seq {from_seq}" if from_seq == to_seq else f"seqs {from_seq} to {to_seq}"
        raise RefusedError(f"bridge {database.bridge_name!r} has no open dead letter at {span}; "
                           "`outbox-bridge dead-letters list` shows the open ones")
    return found


def _close(database: DatabaseSection, seqs: list[int], status: str, reason: str, mode_reason: str) -> list[int]:
    engine = make_engine(database.url_text)
    now = datetime.now(UTC)
    try:
        with engine.begin() as conn:
            closed = store.close(conn, database.bridge_name, seqs, status, requester(), reason, now)
            if closed and status == store.RESOLVED:
                audit(conn, database.bridge_name, "resolve", min(closed), max(closed), status="done",
                      reason=mode_reason, filters={"seqs": closed[:1000]})
    except DBAPIError as exc:
        raise store_error(exc, f"marking dead letters {status}") from exc
    finally:
        engine.dispose()
    return closed


def resolve(database: DatabaseSection, from_seq: int, to_seq: int, reason: str) -> dict[str, Any]:
    """Mark the open dead letters from `from_seq` to `to_seq` resolved without publishing them (audited)."""
    if not reason or not reason.strip():
        raise RefusedError("--reason is required: say why these events need not be published (it is audited)")
    letters = _open_in(database, from_seq, to_seq)
    closed = _close(database, [d.seq for d in letters], store.RESOLVED, reason, reason)
    return {"bridge_name": database.bridge_name, "resolved": closed,
            "note": "retention and cleanup may now delete these rows"}


def republish(config: BridgeConfig, from_seq: int, to_seq: int, reason: str | None,
              show_progress: bool = True) -> dict[str, Any]:
    """Publish the open dead letters from `from_seq` to `to_seq` to their own topics (a range replay of exactly
    those seqs, audited), then mark them republished; a failure leaves them open."""
    from bridge import replay, replay_range

    letters = _open_in(config.database, from_seq, to_seq)
    seqs = tuple(d.seq for d in letters)
    request = replay.ReplayRequest(from_seq=seqs[0], to_seq=seqs[-1], aggregate_type=None, event_type=None,
                                   mode="range", topic=None, reason=reason or "republish dead letters",
                                   dry_run=False, seqs=seqs)
    result = replay_range.publish_range(config, request, show_progress=show_progress)
    closed = _close(config.database, list(seqs), store.REPUBLISHED,
                    reason or f"republished (audit {result['audit_id']})", reason or "")
    return result | {"republished": closed, "note": "retention and cleanup may now delete these rows"}
