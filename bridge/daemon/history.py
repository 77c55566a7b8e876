"""Before a new leader publishes: every row it has still to publish must be there, or an operator must say
where it starts instead.

Retention and `cleanup` delete only what every registered bridge name has published, and record what
they deleted (`bridge.store.deletable`). A name whose watermark is below a deletion (a name new on an
outbox whose early rows are gone, a retired name, or one an older release's cleanup passed over) would
read the gaps as rolled-back transactions and skip those events for good. It refuses instead, with exit
code 10, naming the deleted seqs, when and by whom, unless started with `--start-from` (`BRIDGE_START_FROM`:
`earliest`, the oldest row still in the outbox, or a seq), which is audited as a `start` in
`bridge_replay_audit`. A retired name leads again only that way too.
"""

from __future__ import annotations

import logging

from bridge.errors import OutboxError
from bridge.exits import EXIT_ROWS_GONE
from bridge.store.lease import History, Lease, StartAt

log = logging.getLogger("bridge.daemon")

EARLIEST = "earliest"


class RowsGoneError(OutboxError):
    """This bridge name may not lead from its watermark: the rows above it are (partly) gone, or the name
    was retired. Not retried: only an operator's decision (`--start-from`) changes that."""

    exit_code = EXIT_ROWS_GONE


def start_point(history: History, lease: Lease, start_from: str | None, requested_by: str) -> StartAt | None:
    """Where this leader starts: None for its watermark, a `StartAt` when the operator's `start_from`
    applies; `RowsGoneError` when it may not start at its watermark and no `start_from` says where."""
    name = lease.bridge_name
    watermark = history.watermark
    problem = _problem(history, lease)
    if problem is None:
        if start_from is None:
            return None
        if lease.led_before:
            log.warning("--start-from (BRIDGE_START_FROM) ignored: this bridge name leads from its watermark; to "
                        "publish again from an earlier seq use `outbox-bridge replay`; remove the setting",
                        extra={"bridge": name, "watermark": watermark, "start_from": start_from})
            return None
        problem = f"bridge name {name!r} is new on this outbox"
    if start_from is None:
        raise RowsGoneError(f"{problem}. {_fix(history)}")
    start = _watermark_for(history, start_from)
    # Deleted seqs above the old watermark are never published by this name, wherever it starts.
    accepted = history.deleted.through_seq if history.deleted is not None else None
    reason = f"{problem}; started at seq {start + 1} (--start-from {start_from})"
    if accepted is not None:
        reason += f", accepting that deleted seqs up to {accepted} are never published by this name"
    log.warning("starting where the operator said, not at the watermark",
                extra={"bridge": name, "watermark": watermark, "start_at_seq": start + 1, "reason": reason})
    return StartAt(start, requested_by, reason, accepted)


def _problem(history: History, lease: Lease) -> str | None:
    name = lease.bridge_name
    if history.retired_at is not None:
        why = f": {history.retired_reason}" if history.retired_reason else ""
        return (f"bridge name {name!r} was retired at {history.retired_at.isoformat(timespec='seconds')}{why}; it held "
                f"retention back no longer, so rows above its watermark {history.watermark} may be gone")
    deleted = history.deleted
    if deleted is None:
        return None
    if not lease.led_before and history.watermark == 0:
        return f"bridge name {name!r} is new on this outbox, and {deleted.describe()}"
    return (f"bridge {name!r} has published up to seq {history.watermark}, but {deleted.describe()} before it "
            "published them: leading from its watermark would pass them over as rolled-back transactions")


def _fix(history: History) -> str:
    earliest = (f"the oldest row still in the outbox, seq {history.oldest_seq}" if history.oldest_seq is not None
                else "the outbox is empty: the next seq written")
    return ("Publish the missing events from another source if this name's consumers need them (another bridge "
            "name's topics, a backup), then start it where it should begin, accepting the rest as lost: "
            f"`outbox-bridge run --start-from earliest` ({earliest}) or `--start-from SEQ` (BRIDGE_START_FROM). "
            "The start is audited in bridge_replay_audit; remove the option once the bridge leads")


def _watermark_for(history: History, start_from: str) -> int:
    deleted_through = history.deleted.through_seq if history.deleted else 0
    if start_from == EARLIEST:
        return history.oldest_seq - 1 if history.oldest_seq is not None else max(deleted_through, history.watermark)
    seq = int(start_from)
    newest = max(history.head_seq or 0, deleted_through, history.watermark)
    if seq > newest + 1:
        raise RowsGoneError(f"--start-from {seq} is above the newest seq {newest} + 1: the events written up to it "
                            f"would be skipped; start at {newest + 1} or lower")
    return seq - 1
