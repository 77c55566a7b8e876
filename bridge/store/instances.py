"""Each running instance of a bridge name and its state, in `bridge_instances`: `starting` (with the start-up
step that keeps failing, how often, since when and its error), `standing-by` or `leading`.

The instance writes its own row, best effort: a database that fails the start-up check may fail this write
too, and then the log and the metrics still say it. A graceful stop removes the row; one left by a crash
shows its age (`updated_at`). `outbox-bridge status` and `doctor` read the rows.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from bridge.errors import StoreError
from bridge.schema import as_utc, bridge_instances

log = logging.getLogger("bridge.store")

STARTING: Final = "starting"
STANDING_BY: Final = "standing-by"
LEADING: Final = "leading"
#: A failing step is written at most this often (its retries back off from 0.2 s).
_STARTING_EVERY_S: Final = 2.0


class InstanceBoard:
    """This instance's row in `bridge_instances`."""

    def __init__(self, engine: Engine, bridge_name: str, instance: str) -> None:
        self._engine = engine
        self._name = bridge_name
        self._instance = instance[:255]
        self._written: tuple[str, float] | None = None

    def report(self, state: str, *, step: str | None = None, attempts: int = 0, since: datetime | None = None,
               error: str | None = None) -> None:
        """Write this instance's state; a repeated `starting` at most every couple of seconds."""
        now = time.monotonic()
        if self._written is not None and self._written[0] == state == STARTING and \
                now - self._written[1] < _STARTING_EVERY_S:
            return
        values = {"state": state, "step": step, "attempts": attempts, "failing_since": since,
                  "error": error[:4000] if error else None, "updated_at": datetime.now(UTC)}
        table = bridge_instances
        try:
            with self._engine.begin() as conn:
                done = conn.execute(update(table).where(table.c.bridge_name == self._name,
                                                        table.c.instance == self._instance).values(**values))
                if done.rowcount == 0:
                    conn.execute(insert(table).values(bridge_name=self._name, instance=self._instance, **values))
        except (DBAPIError, StoreError) as exc:
            log.debug("could not write this instance's state", extra={"state": state, "error": str(exc)})
            return
        self._written = (state, now)

    def remove(self) -> None:
        """A graceful stop: this instance no longer runs."""
        table = bridge_instances
        try:
            with self._engine.begin() as conn:
                conn.execute(delete(table).where(table.c.bridge_name == self._name,
                                                 table.c.instance == self._instance))
        except (DBAPIError, StoreError) as exc:
            log.debug("could not remove this instance's row", extra={"error": str(exc)})


def listed(conn: Connection, bridge_name: str) -> list[dict[str, Any]]:
    """The instances of `bridge_name` that reported, the most recent first."""
    table = bridge_instances
    rows = conn.execute(select(table).where(table.c.bridge_name == bridge_name)
                        .order_by(table.c.updated_at.desc())).mappings()
    return [
        {"instance": r["instance"], "state": r["state"], "step": r["step"], "attempts": int(r["attempts"]),
         "failing_since": as_utc(r["failing_since"]).isoformat(timespec="seconds") if r["failing_since"] else None,
         "error": r["error"], "updated_at": as_utc(r["updated_at"]).isoformat(timespec="seconds")}
        for r in rows
    ]
