"""What the bridge's database login needs on the outbox tables, and which of it the login lacks.

The daemon reads `domain_events` (and deletes from it when retention is on, recording each run in
`bridge_deletions`), reads and writes its own `bridge_offsets` row, reads and settles rewind requests in
`bridge_replay_audit` (and audits a `--start-from` there), records its dead letters in `bridge_dead_letters`,
reads what cleanup deleted before it leads, and reads the schema revision at start. A login missing any
of these fails only when that statement first runs, perhaps
hours later (the first rewind request, the first retention pass); `outbox-bridge doctor` asks up front.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sqlalchemy import text
from sqlalchemy.engine import Connection

from bridge.migrate import VERSION_TABLE


def needed_privileges(retention: bool) -> Mapping[str, tuple[str, ...]]:
    """Table -> privileges the running bridge uses on it; DELETE on the outbox only with retention."""
    return {
        "domain_events": ("SELECT", "DELETE") if retention else ("SELECT",),
        "bridge_offsets": ("SELECT", "INSERT", "UPDATE"),
        "bridge_replay_audit": ("SELECT", "INSERT", "UPDATE"),
        "bridge_dead_letters": ("SELECT", "INSERT", "UPDATE"),
        "bridge_deletions": ("SELECT", "INSERT", "UPDATE") if retention else ("SELECT",),
        "bridge_instances": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        VERSION_TABLE: ("SELECT",),
    }


_HAS_PRIVILEGE: Final = {
    "postgresql": text("SELECT has_table_privilege(current_user, :table, :privilege)"),
    "mssql": text("SELECT HAS_PERMS_BY_NAME(:table, 'OBJECT', :privilege)"),
}
_LOGIN: Final = {
    "postgresql": text("SELECT current_user"),
    "mssql": text("SELECT USER_NAME()"),
}


def login(conn: Connection) -> str | None:
    """The database user the bridge works as; None on SQLite, which has no logins."""
    query = _LOGIN.get(conn.dialect.name)
    return None if query is None else str(conn.execute(query).scalar())


def missing_privileges(conn: Connection, retention: bool) -> dict[str, list[str]] | None:
    """Table -> privileges the login lacks (empty when it has them all); None when the database has no
    privileges to check (SQLite). The tables must exist: check the schema revision first."""
    query = _HAS_PRIVILEGE.get(conn.dialect.name)
    if query is None:
        return None
    missing: dict[str, list[str]] = {}
    for table, privileges in needed_privileges(retention).items():
        lacking = [p for p in privileges if not conn.execute(query, {"table": table, "privilege": p}).scalar()]
        if lacking:
            missing[table] = lacking
    return missing


def grant_statements(missing: Mapping[str, list[str]], user: str | None) -> list[str]:
    """The GRANTs that give `user` what `missing_privileges` found lacking."""
    grantee = user or "<bridge login>"
    return [f"GRANT {', '.join(privileges)} ON {table} TO {grantee}" for table, privileges in missing.items()]
