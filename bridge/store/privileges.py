"""Whether the bridge's database login has more rights than publishing needs.

The bridge only reads the outbox (and deletes from it with retention); a superuser or the owner of
`domain_events` could also drop the table, disable the seq path or rewrite history, and a bug or a
stolen password would be that much worse. The daemon says so once at start; it does not refuse, since
a development stack (and the migration itself) rightly runs as the owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlalchemy import text
from sqlalchemy.engine import Connection

FIX: Final = (
    "run the bridge as a least-privilege role: `outbox-bridge grants --sql` prints one "
    "(SELECT on domain_events, read-write on its own tables, DELETE only with retention)"
)

_POSTGRES: Final = text(
    """
    SELECT current_user AS login, r.rolsuper AS superuser, pg_get_userbyid(c.relowner) AS owner,
           pg_has_role(current_user, c.relowner, 'MEMBER') AS owns
    FROM pg_roles AS r LEFT JOIN pg_class AS c ON c.oid = to_regclass('domain_events')
    WHERE r.rolname = current_user
    """
)

# OBJECTPROPERTY's OwnerId is the schema's owner when the table has none of its own.
_MSSQL: Final = text(
    """
    SELECT SUSER_SNAME() AS login, IS_SRVROLEMEMBER('sysadmin') AS superuser,
           IS_ROLEMEMBER('db_owner') AS db_owner,
           USER_NAME(OBJECTPROPERTY(OBJECT_ID('domain_events'), 'OwnerId')) AS owner,
           CASE WHEN OBJECTPROPERTY(OBJECT_ID('domain_events'), 'OwnerId') = DATABASE_PRINCIPAL_ID()
                THEN 1 ELSE 0 END AS owns
    """
)


@dataclass(frozen=True, slots=True)
class ExcessRights:
    """Why the login is more than the bridge needs: the login, and what makes it so."""

    login: str
    why: str


def excess_rights(conn: Connection) -> ExcessRights | None:
    """The login's excess rights (superuser, owner of domain_events), or None; SQLite has no logins."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        row = conn.execute(_POSTGRES).mappings().first()
        if row is None:
            return None
        if row["superuser"]:
            return ExcessRights(row["login"], "a PostgreSQL superuser")
        if row["owns"]:
            owner = row["owner"]
            via = "" if owner == row["login"] else f" (a member of its owner {owner})"
            return ExcessRights(row["login"], f"the owner of domain_events{via}")
        return None
    if dialect == "mssql":
        row = conn.execute(_MSSQL).mappings().first()
        if row is None:
            return None
        if row["superuser"] == 1:
            return ExcessRights(row["login"], "a member of the sysadmin server role")
        if row["db_owner"] == 1:
            return ExcessRights(row["login"], "a member of db_owner")
        if row["owns"] == 1:
            return ExcessRights(row["login"], f"the owner of domain_events ({row['owner']})")
    return None
