"""Whether the database holds the outbox tables at the revision this bridge was built for.

Checked before the bridge leads and by `outbox-bridge doctor`: on a database that was never migrated
every query fails with "no such table", which is not worth retrying; at an older revision a query
may work and still miss what a later migration added (SQL Server's stamp-before-seq trigger).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Final

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from bridge.errors import NotMigratedError
from bridge.migrate import VERSION_TABLE, alembic_config, head
from bridge.store.failures import MIGRATE_FIX, is_permission_denied

log = logging.getLogger("bridge.store")


#: The tables every revision has; their absence means "never migrated" even where the login may not
#: read the version table (a least-privilege bridge role).
_OUTBOX_TABLES: Final = ("domain_events", "bridge_offsets", "bridge_replay_audit")


class RevisionUnreadable(Exception):
    """The login may not read `outbox_alembic_version` (no SELECT on it); the tables themselves exist."""


def schema_revision(conn: Connection) -> str | None:
    """The revision recorded in `outbox_alembic_version`, or None when the outbox was never migrated.

    Raises `RevisionUnreadable` when the tables exist but the login may not read the version table. The
    version table is read first (two round trips); the outbox tables are looked up only when it cannot be
    read, so a start-up on a failing link has as little to get through as it can."""
    # In a savepoint: on PostgreSQL a refused SELECT would otherwise abort the caller's transaction.
    # SQLite has no logins to refuse it, and pysqlite's savepoints need workarounds: none there.
    savepoint = conn.dialect.name != "sqlite" and conn.in_transaction()
    try:
        with conn.begin_nested() if savepoint else nullcontext():
            return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()
    except DBAPIError as exc:
        if not is_permission_denied(exc):
            raise
        if not savepoint and conn.in_transaction():
            conn.rollback()  # the refused SELECT began it (and aborted it, on PostgreSQL): look at the tables anew
        if any(not inspect(conn).has_table(name) for name in _OUTBOX_TABLES):
            return None
        raise RevisionUnreadable(
            f"the login may not read {VERSION_TABLE} ({str(exc.orig).strip().splitlines()[0]}); "
            f"grant it SELECT on {VERSION_TABLE} so the bridge can check the schema revision"
        ) from exc


@dataclass(frozen=True, slots=True)
class RevisionProblem:
    """Why the schema does not suit this bridge, and the fix (None where the summary already says what to do)."""

    summary: str
    fix: str | None = None

    def __str__(self) -> str:
        return self.summary if self.fix is None else f"{self.summary}. {self.fix}"


def revision_problem(current: str | None) -> RevisionProblem | None:
    """What is wrong with the schema at revision `current` for this bridge; None when it is at the newest
    revision."""
    wanted = head()
    if current == wanted:
        return None
    if current is None:
        return RevisionProblem(f"the outbox database is not migrated (no revision in {VERSION_TABLE})", MIGRATE_FIX)
    try:
        known = ScriptDirectory.from_config(alembic_config()).get_revision(current) is not None
    except CommandError:
        known = False
    if not known:
        return RevisionProblem(
            f"the outbox schema is at revision {current!r}, which this bridge does not know (a newer bridge "
            f"migrated it?); run the bridge version that migrated it, or downgrade with that version's "
            f"`outbox-bridge migrate --downgrade --revision {wanted}`"
        )
    return RevisionProblem(f"the outbox schema is at revision {current}, this bridge needs {wanted}", MIGRATE_FIX)


def check_migrated(conn: Connection) -> None:
    """Raise `NotMigratedError` naming the revision found, the one needed and `outbox-bridge migrate`.

    A login that may not read the version table passes when the outbox tables exist: the seq-path
    check that follows still looks at what matters."""
    try:
        current = schema_revision(conn)
    except RevisionUnreadable as exc:
        log.warning("cannot check the outbox schema revision", extra={"error": str(exc)})
        return
    problem = revision_problem(current)
    if problem is not None:
        raise NotMigratedError(f"refusing to start: {problem}")
