"""Whether the database holds the outbox tables at the revision this bridge was built for.

Checked before the bridge leads and by `outbox-bridge doctor`: on a database that was never migrated
every query fails with "no such table", which is not worth retrying; at an older revision a query
may work and still miss what a later migration added (SQL Server's stamp-before-seq trigger).
"""

from __future__ import annotations

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection

from bridge.errors import NotMigratedError
from bridge.migrate import VERSION_TABLE, alembic_config, head
from bridge.store.failures import MIGRATE_FIX


def schema_revision(conn: Connection) -> str | None:
    """The revision recorded in `outbox_alembic_version`, or None when the outbox was never migrated."""
    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def revision_problem(current: str | None) -> str | None:
    """What is wrong with the schema at revision `current` for this bridge, as a sentence with the fix;
    None when it is at the newest revision."""
    wanted = head()
    if current == wanted:
        return None
    if current is None:
        return f"the outbox database is not migrated (no revision in {VERSION_TABLE}). {MIGRATE_FIX}"
    try:
        known = ScriptDirectory.from_config(alembic_config()).get_revision(current) is not None
    except CommandError:
        known = False
    if not known:
        return (
            f"the outbox schema is at revision {current!r}, which this bridge does not know (a newer bridge "
            f"migrated it?); run the bridge version that migrated it, or downgrade with that version's "
            f"`outbox-bridge migrate --downgrade --revision {wanted}`"
        )
    return f"the outbox schema is at revision {current}, this bridge needs {wanted}. {MIGRATE_FIX}"


def check_migrated(conn: Connection) -> None:
    """Raise `NotMigratedError` naming the revision found, the one needed and `outbox-bridge migrate`."""
    problem = revision_problem(schema_revision(conn))
    if problem is not None:
        raise NotMigratedError(f"refusing to start: {problem}")
