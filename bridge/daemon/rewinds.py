"""When the bridge must send again from an earlier seq, as decisions the loop carries out.

Two things ask for it: an operator (`outbox-bridge replay --mode rewind`, a pending request in
`bridge_replay_audit`), and a row found in a hole the bridge had already settled (`bridge.core.late`).
Either way the answer is a `Rewind`: the seq to continue after. A request that would skip events (its
seq above the watermark) is refused here and never becomes a decision; one that does is stored under the
lease (`apply`) before the term sends again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from bridge.core.late import SettledHoles
from bridge.errors import TransientStoreError
from bridge.store.lease import Lease, LeaseStore, RewindRequest
from bridge.store.reader import OutboxReader

log = logging.getLogger("bridge.daemon")


@dataclass(frozen=True, slots=True)
class Rewind:
    """Continue after seq `to`: for an operator's `request`, or for rows found in settled holes (`late`)."""

    to: int
    request: RewindRequest | None = None
    late: tuple[int, ...] = ()


def requested(offsets: LeaseStore, watermark: int) -> Rewind | None:
    """The oldest pending rewind request, as a decision; None when there is none or it was refused."""
    request = offsets.pending_rewind()
    if request is None:
        return None
    target = request.from_seq - 1
    if target > watermark:
        # Moving forward would skip events; the replay command checks this, but the watermark may have
        # been lowered by another rewind since.
        why = f"from_seq {request.from_seq} is above watermark {watermark} + 1; a rewind never skips"
        log.error("refusing a rewind request", extra={"request": request.id, "reason": why})
        offsets.refuse_rewind(request, why)
        return None
    log.info("applying a rewind request", extra={"request": request.id, "from_seq": request.from_seq,
                                                 "watermark": watermark, "requested_by": request.requested_by})
    return Rewind(target, request=request)


def apply(offsets: LeaseStore, lease: Lease, rewind: Rewind, lease_seconds: float,
          on_error: Callable[[str, Exception], None]) -> bool:
    """Store an operator's rewind (`rewind.request`) under `lease`: True once the lower watermark is stored;
    False when the request is no longer pending, or the database failed (tried again at the next persist)."""
    request = rewind.request
    assert request is not None, "apply() is for an operator's rewind request"
    try:
        applied = offsets.apply_rewind(lease, request, lease_seconds)
    except TransientStoreError as exc:
        on_error("database", exc)
        log.warning("could not apply the rewind request now; retrying at the next persist",
                    extra={"request": request.id, "error": str(exc)})
        return False
    if not applied:
        log.warning("rewind request no longer pending; ignored", extra={"request": request.id})
        return False
    log.info("rewound", extra={"request": request.id, "watermark": rewind.to})
    return True


def late_rows(reader: OutboxReader, settled: SettledHoles, watermark: int) -> Rewind | None:
    """Rows that appeared in holes settled earlier, as a rewind to just before the first; None if none."""
    late = reader.rows_in(settled.recent())
    if not late:
        return None
    log.error("rows appeared in seq gaps already settled as rolled back; publishing them late by rewinding "
              "(check that every writer uses the outbox's seq default and no row is inserted with a seq)",
              extra={"seqs": late[:20], "rewind_to": late[0] - 1, "watermark": watermark})
    return Rewind(min(late[0] - 1, watermark), late=tuple(late))
