"""Who holds the horizon back: the transaction a pending hole waits for, as every dialect names it.

A reader's `horizon_holder()` returns one `HorizonHolder` (PostgreSQL from `pg_stat_activity` and
`pg_prepared_xacts`, SQL Server from its session views); `status`, `doctor` and the persisted status show
it as `as_status()` gives it: the fields its database reports, and the seq that waits on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

#: What PostgreSQL says of a holder, in the order the status shows it.
POSTGRES_FIELDS: Final = ("pid", "xid", "started_at", "state", "application_name", "client", "query")
#: What SQL Server's session views say of a holder, in the order the status shows it.
MSSQL_FIELDS: Final = ("pid", "xid", "started_at", "state", "application_name", "client", "login")


@dataclass(frozen=True, slots=True)
class HorizonHolder:
    """A running transaction that holds the horizon back: the operator's answer to "why is it stuck".

    `pid` is PostgreSQL's backend pid (None for a prepared, two-phase transaction, whose `state` says how to
    end it) or SQL Server's session id. `reported` names the fields its database reports, so a field it
    knows to be empty shows as null and one it never reports does not show at all."""

    pid: int | None
    xid: str | None = None
    started_at: datetime | None = None
    state: str | None = None
    application_name: str | None = None
    client: str | None = None
    #: PostgreSQL: the start of the session's last statement.
    query: str | None = None
    #: SQL Server: the session's login.
    login: str | None = None
    #: Why no more than the session is named (the login may not read the server's views).
    unknown: str | None = None
    #: The first seq of the hole that waits on it, when a reader named it for one.
    waiting_on_seq: int | None = None
    reported: tuple[str, ...] = field(kw_only=True)

    def as_status(self) -> dict[str, Any]:
        """The holder as `status`, `doctor` and the persisted status show it (JSON-ready)."""
        shown = {name: getattr(self, name) for name in self.reported}
        if "started_at" in shown:
            shown["started_at"] = self.started_at.isoformat() if self.started_at else None
        if self.waiting_on_seq is not None:
            shown["waiting_on_seq"] = self.waiting_on_seq
        return shown

    def __getitem__(self, key: str) -> Any:
        """The value the status shows under `key`."""
        return self.as_status()[key]

    def age_s(self) -> float | None:
        """How long its transaction has run, when the database says when it started."""
        if self.started_at is None:
            return None
        return (datetime.now(UTC) - self.started_at).total_seconds()
