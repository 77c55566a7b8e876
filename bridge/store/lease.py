"""What the daemon needs of the lease and the watermark (`LeaseStore`), and the values it passes: the lease, a
rewind request, what a new leader learns before it publishes (`History`), and where an operator told it to
start (`StartAt`). `bridge.store.offsets.OffsetStore` keeps them in the database; `bridge.store.testing`
keeps them in memory for fast tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from bridge.store.dead_letters import DeadLetter, OpenDeadLetters
from bridge.store.deletable import Deleted


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to publish for `bridge_name`, valid while `epoch` is the row's epoch."""

    bridge_name: str
    owner: str
    epoch: int
    watermark: int
    #: Whether an instance of this name ever led before this lease (False for a name new on the outbox).
    led_before: bool = True


@dataclass(frozen=True, slots=True)
class History:
    """What a leader must know before it publishes from its watermark: whether the name was retired, and
    what cleanup deleted above the watermark (`bridge.daemon.history` decides from it)."""

    watermark: int
    retired_at: datetime | None
    retired_reason: str | None
    deleted: Deleted | None
    #: The lowest and highest seq still in the outbox (None when it is empty).
    oldest_seq: int | None
    head_seq: int | None


@dataclass(frozen=True, slots=True)
class StartAt:
    """Where a leader starts instead of its watermark, as an operator asked (`--start-from`), audited."""

    watermark: int
    requested_by: str
    reason: str
    #: The highest deleted seq the operator accepts as lost (to_seq of the audit row), if any.
    accepted_through: int | None


@dataclass(frozen=True, slots=True)
class RewindRequest:
    """A pending `bridge_replay_audit` row asking the running leader to re-publish from `from_seq`."""

    id: int
    from_seq: int
    requested_by: str
    reason: str | None


class LeaseStore(Protocol):
    """What the daemon needs of the lease and the watermark: `OffsetStore` on a database, or the
    in-memory one of `bridge.store.testing` in fast tests. Every write is fenced by the lease's epoch."""

    def try_acquire(self, owner: str, lease_seconds: float) -> Lease | None:
        """Take the lease if it is free or expired (bumping the epoch); None if another instance holds it."""
        ...

    def persist(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], *,
                dead_letters: Sequence[DeadLetter] = ()) -> None:
        """Write the watermark (never lower than the stored one), record the dead letters it passes, and
        renew; FencedError if stale."""
        ...

    def persist_rewound(self, lease: Lease, watermark: int, lease_seconds: float, status: dict[str, Any], *,
                        dead_letters: Sequence[DeadLetter] = ()) -> None:
        """As `persist`, writing `watermark` even below the stored one: after a rewind to publish rows that
        turned up in holes the daemon had settled."""
        ...

    def release(self, lease: Lease) -> None: ...

    def history(self, watermark: int) -> History:
        """Retirement and what cleanup deleted above `watermark`, for a new leader."""
        ...

    def start_at(self, lease: Lease, start: StartAt, lease_seconds: float) -> None:
        """Move the watermark to `start.watermark` (either way) under `lease`, un-retire the name, audit it."""
        ...

    def open_dead_letters(self) -> OpenDeadLetters: ...

    def pending_rewind(self) -> RewindRequest | None: ...

    def apply_rewind(self, lease: Lease, request: RewindRequest, lease_seconds: float) -> bool: ...

    def refuse_rewind(self, request: RewindRequest, why: str) -> None: ...
