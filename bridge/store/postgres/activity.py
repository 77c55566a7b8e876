"""What holds the horizon back on PostgreSQL: the oldest transactions with an id, from `pg_stat_activity` and
`pg_prepared_xacts`."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from bridge.store.failures import store_error
from bridge.store.holders import POSTGRES_FIELDS, HorizonHolder

# Prepared (two-phase) transactions hold the horizon too but have no session in pg_stat_activity: a
# forgotten one stalls the bridge for good, so it is listed with the command that ends it.
_HOLDERS = text(
    """
    SELECT pid, backend_xid::text AS xid, xact_start AS started_at, state, application_name,
           client_addr::text AS client, left(query, 300) AS query, age(backend_xid) AS xid_age
    FROM pg_stat_activity
    WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
    UNION ALL
    SELECT NULL, transaction::text, prepared,
           'prepared: end it with COMMIT PREPARED or ROLLBACK PREPARED ' || quote_literal(gid),
           NULL, NULL, NULL, age(transaction)
    FROM pg_prepared_xacts
    ORDER BY xid_age DESC
    LIMIT :limit
    """
)


def horizon_holders(conn: Connection, limit: int = 5) -> list[HorizonHolder]:
    """The oldest running or prepared transactions that have a transaction id, oldest first: the ones a
    pending hole waits for. Query texts of other users show only with `pg_read_all_stats`."""
    try:
        result = conn.execute(_HOLDERS, {"limit": limit}).mappings().all()
    except DBAPIError as exc:
        raise store_error(exc, "listing the transactions that hold the horizon (pg_stat_activity)") from exc
    return [
        HorizonHolder(
            pid=None if row["pid"] is None else int(row["pid"]),
            xid=row["xid"],
            started_at=row["started_at"],
            state=row["state"],
            application_name=row["application_name"],
            client=row["client"],
            query=row["query"],
            reported=POSTGRES_FIELDS,
        )
        for row in result
    ]
