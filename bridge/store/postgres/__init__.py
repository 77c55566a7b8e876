"""Reading the outbox on PostgreSQL below the commit-visibility horizon, and naming what holds it back.

- `reader`: `PostgresReader`, the reader `make_reader` gives for PostgreSQL, assembled from the parts below;
- `visible`: the visible rows and `pg_current_snapshot()` in one statement (`PostgresSession`, `read_visible`);
- `connection`: the reads' own connection kept between reads, and how the bridge's sessions are named;
- `ahead`: in a backlog, the next read sent ahead in psycopg's pipeline mode;
- `listen`: LISTEN/NOTIFY, to wake up within milliseconds of a commit;
- `activity`: the transactions that hold the horizon back, as `HorizonHolder`s.
"""

from bridge.store.holders import HorizonHolder
from bridge.store.postgres.activity import horizon_holders
from bridge.store.postgres.connection import APPLICATION_NAME, application_name
from bridge.store.postgres.reader import PostgresReader
from bridge.store.postgres.visible import PostgresSession, read_visible

__all__ = [
    "APPLICATION_NAME",
    "HorizonHolder",
    "PostgresReader",
    "PostgresSession",
    "application_name",
    "horizon_holders",
    "read_visible",
]
