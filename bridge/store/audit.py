"""`bridge_replay_audit`: who asked for what, when, and how it ended.

Replays (`rewind`, `range`) and the other operator actions that decide what a bridge name publishes or what
the outbox keeps (`start` past deleted rows, `retire` a name, `resolve` dead letters) each leave a row here.
"""

from __future__ import annotations

import getpass
import json
import socket
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.engine import Connection

from bridge.schema import bridge_replay_audit


def requester() -> str:
    """Who runs this command: user@host."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def audit(conn: Connection, bridge_name: str, mode: str, from_seq: int, to_seq: int | None, *, status: str,
          reason: str | None, filters: dict[str, Any] | None = None, requested_by: str | None = None) -> int:
    """Insert an audit row in `conn`'s transaction; returns its id."""
    now = datetime.now(UTC)
    result = conn.execute(
        insert(bridge_replay_audit).values(
            bridge_name=bridge_name, mode=mode, from_seq=from_seq, to_seq=to_seq,
            filters_json=json.dumps(filters) if filters else None, requested_by=(requested_by or requester())[:255],
            reason=reason, requested_at=now, status=status,
            applied_at=now if status in ("applied", "done") else None,
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])
