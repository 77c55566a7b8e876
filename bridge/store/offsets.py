"""The persisted low watermark and the lease that fences it: one active bridge per name.

Every write of the watermark names the epoch the writer was granted; a take-over bumps the epoch, so
a paused former leader that wakes up finds its epoch stale and cannot move the watermark. The
watermark only moves forward, except through a rewind requested in `bridge_replay_audit`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import case, func, insert, select, text, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from bridge.errors import FencedError
from bridge.schema import as_utc, bridge_offsets, bridge_replay_audit, domain_events
from bridge.store import dead_letters as dead_letters_module
from bridge.store.dead_letters import DeadLetter, OpenDeadLetters
from bridge.store.deletable import deleted_above, hold_offsets
from bridge.store.failures import store_error
from bridge.store.lease import History, Lease, RewindRequest, StartAt


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """What `bridge_offsets` says about one bridge."""

    bridge_name: str
    watermark: int
    epoch: int
    owner: str | None
    lease_expires_at: datetime | None
    heartbeat_at: datetime | None
    updated_at: datetime | None
    status: dict[str, Any]
    retired_at: datetime | None = None
    retired_reason: str | None = None



def _now(conn: Connection) -> datetime:
    """The database's clock. Leases are compared across machines, so every instance measures them by
    the same clock, never its own (SQLite is on this machine, so its clock is this one's)."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        value = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
    elif dialect == "mssql":
        value = conn.execute(text("SELECT SYSUTCDATETIME()")).scalar_one()
    else:
        return datetime.now(UTC)
    return as_utc(value)


class OffsetStore:
    """Reads and writes `bridge_offsets` through one engine; every write is fenced by epoch and owner."""

    def __init__(self, engine: Engine, bridge_name: str) -> None:
        self._engine = engine
        self._name = bridge_name

    def read(self) -> OffsetRow | None:
        try:
            with self._engine.connect() as conn:
                row = conn.execute(select(bridge_offsets).where(bridge_offsets.c.bridge_name == self._name)).first()
        except DBAPIError as exc:
            raise store_error(exc, f"reading bridge_offsets for {self._name!r}") from exc
        if row is None:
            return None
        return OffsetRow(
            bridge_name=row.bridge_name,
            watermark=int(row.watermark),
            epoch=int(row.epoch),
            owner=row.owner,
            lease_expires_at=row.lease_expires_at,
            heartbeat_at=row.heartbeat_at,
            updated_at=row.updated_at,
            status=json.loads(row.status_json) if row.status_json else {},
            retired_at=row.retired_at,
            retired_reason=row.retired_reason,
        )

    def ensure_row(self, start_watermark: int = 0) -> None:
        """Create this bridge's row on first use; a concurrent creator winning the race is fine."""
        if self.read() is not None:
            return
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    insert(bridge_offsets).values(
                        bridge_name=self._name, watermark=start_watermark, epoch=0, updated_at=_now(conn)
                    )
                )
        except IntegrityError:
            pass
        except DBAPIError as exc:
            raise store_error(exc, f"creating the bridge_offsets row for {self._name!r}") from exc

    def try_acquire(self, owner: str, lease_seconds: float) -> Lease | None:
        """Take the lease if it is free, expired or already ours; return it with a new epoch, else None."""
        self.ensure_row()
        current = self.read()
        if current is None:
            return None
        epoch = current.epoch + 1
        try:
            with self._engine.begin() as conn:
                now = _now(conn)
                free = current.owner is None or current.owner == owner or (
                    current.lease_expires_at is None or current.lease_expires_at <= now
                )
                if not free:
                    return None
                # Compare-and-set on the epoch: of two instances racing for a free lease, one wins.
                result = conn.execute(
                    update(bridge_offsets)
                    .where(bridge_offsets.c.bridge_name == self._name, bridge_offsets.c.epoch == current.epoch)
                    .values(
                        owner=owner,
                        epoch=epoch,
                        lease_expires_at=now + timedelta(seconds=lease_seconds),
                        heartbeat_at=now,
                        updated_at=now,
                    )
                )
        except DBAPIError as exc:
            raise store_error(exc, f"taking the lease of bridge {self._name!r}") from exc
        if result.rowcount != 1:
            return None
        return Lease(self._name, owner, epoch, current.watermark, led_before=current.heartbeat_at is not None)

    def persist(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], *,
                dead_letters: Sequence[DeadLetter] = ()) -> None:
        """Write the watermark and renew the lease; raise FencedError if another instance took over.

        The stored watermark never moves back here (`persist_rewound` and `apply_rewind` lower it). The
        dead letters the watermark passes are recorded in the same transaction: once retention can see the
        new watermark, it sees them too.
        """
        column = bridge_offsets.c.watermark
        self._persist(lease, case((column < watermark, watermark), else_=column), watermark, lease_seconds, status,
                      dead_letters)

    def persist_rewound(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], *,
                        dead_letters: Sequence[DeadLetter] = ()) -> None:
        """As `persist`, but the watermark is written as given, below the stored one too: the daemon rewound
        to publish rows that turned up in holes it had settled (`bridge.daemon.rewinds.late_rows`)."""
        self._persist(lease, watermark, watermark, lease_seconds, status, dead_letters)

    def _persist(self, lease: Lease, written: Any, watermark: int, lease_seconds: float, status: dict[str, Any],
                 dead_letters: Sequence[DeadLetter]) -> None:
        """The fenced write of both: `written` is what the watermark column is set to (`watermark`, or an
        expression that keeps the stored one when it is higher)."""
        try:
            with self._engine.begin() as conn:
                now = _now(conn)
                self._write_fenced(conn, lease, lease_seconds, now, watermark=written,
                                   status_json=json.dumps(status, default=str, separators=(",", ":")))
                if dead_letters:
                    dead_letters_module.record(conn, self._name, dead_letters, now)
        except DBAPIError as exc:
            raise store_error(exc, f"persisting the watermark {watermark} of bridge {self._name!r}") from exc

    def _write_fenced(self, conn: Connection, lease: Lease, lease_seconds: float, now: datetime,
                      **values: Any) -> None:
        result = conn.execute(
            update(bridge_offsets)
            .where(
                bridge_offsets.c.bridge_name == self._name,
                bridge_offsets.c.epoch == lease.epoch,
                bridge_offsets.c.owner == lease.owner,
            )
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds), heartbeat_at=now, updated_at=now,
                    **values)
        )
        if result.rowcount != 1:
            raise FencedError(
                f"bridge {self._name!r}: lease epoch {lease.epoch} held by {lease.owner} is no longer current; "
                "another instance took over, so this one stops publishing"
            )

    # ------------------------------------------------------------------------ history and dead letters

    def history(self, watermark: int) -> History:
        try:
            with self._engine.connect() as conn:
                row = conn.execute(select(bridge_offsets.c.retired_at, bridge_offsets.c.retired_reason)
                                   .where(bridge_offsets.c.bridge_name == self._name)).first()
                deleted = deleted_above(conn, watermark)
                oldest, head = conn.execute(select(func.min(domain_events.c.seq), func.max(domain_events.c.seq))).one()
        except DBAPIError as exc:
            raise store_error(exc, f"reading what cleanup deleted above bridge {self._name!r}'s watermark") from exc
        return History(watermark, as_utc(row.retired_at) if row and row.retired_at else None,
                       row.retired_reason if row else None, deleted,
                       None if oldest is None else int(oldest), None if head is None else int(head))

    def start_at(self, lease: Lease, start: StartAt, lease_seconds: float) -> None:
        try:
            with self._engine.begin() as conn:
                now = _now(conn)
                self._write_fenced(conn, lease, lease_seconds, now, watermark=start.watermark, retired_at=None,
                                   retired_reason=None)
                conn.execute(insert(bridge_replay_audit).values(
                    bridge_name=self._name, mode="start", from_seq=start.watermark + 1,
                    to_seq=start.accepted_through, requested_by=start.requested_by[:255], reason=start.reason,
                    requested_at=now, applied_at=now, status="applied"))
        except DBAPIError as exc:
            raise store_error(exc, f"starting bridge {self._name!r} at seq {start.watermark + 1}") from exc

    def open_dead_letters(self) -> OpenDeadLetters:
        try:
            with self._engine.connect() as conn:
                return dead_letters_module.open_summary(conn, self._name)
        except DBAPIError as exc:
            raise store_error(exc, f"counting the open dead letters of bridge {self._name!r}") from exc

    # ------------------------------------------------------------------------------------ rewinds

    def pending_rewind(self) -> RewindRequest | None:
        """The oldest rewind request for this bridge that no instance has applied or refused yet."""
        audit = bridge_replay_audit
        query = (
            select(audit.c.id, audit.c.from_seq, audit.c.requested_by, audit.c.reason)
            .where(audit.c.bridge_name == self._name, audit.c.mode == "rewind", audit.c.status == "pending")
            .order_by(audit.c.id)
            .limit(1)
        )
        try:
            with self._engine.connect() as conn:
                row = conn.execute(query).first()
        except DBAPIError as exc:
            raise store_error(exc, f"reading pending rewinds of bridge {self._name!r}") from exc
        if row is None:
            return None
        return RewindRequest(int(row.id), int(row.from_seq), row.requested_by, row.reason)

    def apply_rewind(self, lease: Lease, request: RewindRequest, lease_seconds: float) -> bool:
        """Lower the watermark to `from_seq - 1` and mark the request applied, in one transaction.

        Returns False (nothing changed) when the request is no longer pending, e.g. the operator's
        command gave up waiting and marked it refused; raises FencedError if this lease is stale.
        """
        audit = bridge_replay_audit
        try:
            with self._engine.begin() as conn:
                # The offsets row first, as cleanup and a rewind request take it: one lock order, no deadlock.
                hold_offsets(conn, self._name)
                now = _now(conn)
                marked = conn.execute(
                    update(audit).where(audit.c.id == request.id, audit.c.status == "pending")
                    .values(status="applied", applied_at=now)
                )
                if marked.rowcount != 1:
                    conn.rollback()
                    return False
                # Fenced like every watermark write: a stale leader's transaction rolls back here.
                self._write_fenced(conn, lease, lease_seconds, now, watermark=request.from_seq - 1)
        except DBAPIError as exc:
            raise store_error(exc, f"applying rewind request {request.id} of bridge {self._name!r}") from exc
        return True

    def refuse_rewind(self, request: RewindRequest, why: str) -> None:
        """Mark a rewind request refused, appending why to its reason, without touching the watermark."""
        audit = bridge_replay_audit
        reason = f"{request.reason} [refused: {why}]" if request.reason else f"[refused: {why}]"
        try:
            with self._engine.begin() as conn:
                conn.execute(update(audit).where(audit.c.id == request.id, audit.c.status == "pending")
                             .values(status="refused", reason=reason))
        except DBAPIError as exc:
            raise store_error(exc, f"refusing rewind request {request.id} of bridge {self._name!r}") from exc

    # -------------------------------------------------------------------------------------- lease

    def release(self, lease: Lease) -> None:
        """Give the lease up after a graceful stop, so a standby takes over at once."""
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    update(bridge_offsets)
                    .where(bridge_offsets.c.bridge_name == self._name, bridge_offsets.c.epoch == lease.epoch)
                    .values(owner=None, lease_expires_at=None, updated_at=_now(conn))
                )
        except DBAPIError as exc:
            raise store_error(exc, f"releasing the lease of bridge {self._name!r}") from exc

    def set_watermark(self, watermark: int, expected_epoch: int | None = None) -> int:
        """Move the watermark to any value (replay); bumps the epoch so a running leader re-reads it.

        Returns the new epoch. With `expected_epoch`, fails with FencedError if the epoch moved meanwhile.
        """
        current = self.read()
        if current is None:
            self.ensure_row(watermark)
            current = self.read()
            assert current is not None
        epoch = current.epoch if expected_epoch is None else expected_epoch
        try:
            with self._engine.begin() as conn:
                result = conn.execute(
                    update(bridge_offsets)
                    .where(bridge_offsets.c.bridge_name == self._name, bridge_offsets.c.epoch == epoch)
                    .values(watermark=watermark, epoch=epoch + 1, owner=None, lease_expires_at=None,
                            updated_at=_now(conn))
                )
        except DBAPIError as exc:
            raise store_error(exc, f"setting the watermark of bridge {self._name!r}") from exc
        if result.rowcount != 1:
            raise FencedError(f"bridge {self._name!r}: epoch moved while setting the watermark; retry")
        return epoch + 1
