"""Create the outbox: domain_events, and the bridge's offsets, replay audit and settled holes.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Per dialect, `domain_events.seq` and the commit-visibility ("horizon") column differ:

- SQLite: `seq INTEGER PRIMARY KEY AUTOINCREMENT` (a rowid alias; AUTOINCREMENT so a seq is never
  reused after the highest row is deleted). No horizon column: one writer at a time.
- SQL Server: `seq BIGINT IDENTITY(1,1)` and `row_version rowversion` (indexed), read below
  `MIN_ACTIVE_ROWVERSION()`.
- PostgreSQL: `txid xid8 DEFAULT pg_current_xact_id()`, and `seq BIGINT DEFAULT outbox_next_seq()`.
  The function takes the transaction id *before* it takes the seq. The reader treats a seq missing
  below a visible one as a hole that settles once its snapshot's xmin passes the xmax of the snapshot
  that first saw it; that is only sound if whoever holds a seq already held an xid when it took the
  seq. A plain `nextval` default runs before the INSERT assigns an xid, so a writer could hold a seq
  but no xid yet, be invisible to the reader's snapshot in every respect, and have its event settled as
  a hole and lost. The sequence has CACHE 1 for the same reason: with per-session caches a low seq
  could be handed out long after a higher one committed.
  An AFTER INSERT ... FOR EACH STATEMENT trigger notifies `outbox_events` so a bridge can LISTEN.

This revision is frozen: later schema changes go in new revisions, and `bridge.schema` describes the
result (a test compares a migrated database with it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mssql

from bridge.schema import XID8, LongText, UtcTimestamp, utc_now

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

SUPPORTED = ("sqlite", "postgresql", "mssql")

POSTGRES_SEQUENCE = "CREATE SEQUENCE domain_events_seq_seq AS BIGINT START WITH 1 INCREMENT BY 1 CACHE 1 NO CYCLE"

POSTGRES_SEQ_FUNCTION = """
CREATE FUNCTION outbox_next_seq() RETURNS BIGINT
LANGUAGE plpgsql VOLATILE
-- The search_path of the migration, so the sequence is found whatever the inserting session's path.
SET search_path FROM CURRENT
AS $$
BEGIN
    -- Take (or reuse) this transaction's id before taking a seq: see revision 0001 for why.
    PERFORM pg_current_xact_id();
    RETURN nextval('domain_events_seq_seq');
END
$$
"""

POSTGRES_NOTIFY_FUNCTION = """
CREATE FUNCTION outbox_notify() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('outbox_events', '');
    RETURN NULL;
END
$$
"""

POSTGRES_NOTIFY_TRIGGER = """
CREATE TRIGGER domain_events_notify
AFTER INSERT ON domain_events
FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify()
"""


def dialect_name() -> str:
    name = op.get_context().dialect.name
    if name not in SUPPORTED:
        raise NotImplementedError(f"the outbox migrations support {', '.join(SUPPORTED)}, not {name}")
    return name


def seq_column(dialect: str) -> sa.Column[int]:
    if dialect == "postgresql":
        return sa.Column("seq", sa.BigInteger, primary_key=True, server_default=sa.text("outbox_next_seq()"))
    if dialect == "mssql":
        return sa.Column("seq", sa.BigInteger, sa.Identity(start=1, increment=1), primary_key=True)
    return sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True)


def horizon_columns(dialect: str) -> list[sa.Column[object]]:
    if dialect == "postgresql":
        return [sa.Column("txid", XID8(), nullable=False, server_default=sa.text("pg_current_xact_id()"))]
    if dialect == "mssql":
        return [sa.Column("row_version", mssql.ROWVERSION(), nullable=False)]
    return []


def upgrade() -> None:
    dialect = dialect_name()
    if dialect == "postgresql":
        op.execute(POSTGRES_SEQUENCE)
        op.execute(POSTGRES_SEQ_FUNCTION)

    op.create_table(
        "domain_events",
        seq_column(dialect),
        sa.Column("event_id", sa.Unicode(100), nullable=False),
        sa.Column("aggregate_type", sa.Unicode(255), nullable=False),
        sa.Column("aggregate_id", sa.Unicode(255), nullable=False),
        sa.Column("event_type", sa.Unicode(255), nullable=False),
        sa.Column("payload", LongText, nullable=False),
        sa.Column("headers", LongText, nullable=True),
        sa.Column("occurred_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.Column("schema_version", sa.Integer, nullable=False, server_default=sa.text("1")),
        *horizon_columns(dialect),
        sa.PrimaryKeyConstraint("seq", name="pk_domain_events"),
        sa.UniqueConstraint("event_id", name="uq_domain_events_event_id"),
        sqlite_autoincrement=True,
    )
    if dialect == "postgresql":
        op.execute("ALTER SEQUENCE domain_events_seq_seq OWNED BY domain_events.seq")
        op.execute(POSTGRES_NOTIFY_FUNCTION)
        op.execute(POSTGRES_NOTIFY_TRIGGER)
    if dialect == "mssql":
        op.create_index("ix_domain_events_row_version", "domain_events", ["row_version"])

    op.create_table(
        "bridge_offsets",
        sa.Column("bridge_name", sa.String(200), nullable=False),
        sa.Column("watermark", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("epoch", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("owner", sa.Unicode(255), nullable=True),
        sa.Column("lease_expires_at", UtcTimestamp(), nullable=True),
        sa.Column("heartbeat_at", UtcTimestamp(), nullable=True),
        sa.Column("updated_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.Column("status_json", LongText, nullable=True),
        sa.PrimaryKeyConstraint("bridge_name", name="pk_bridge_offsets"),
    )
    op.create_table(
        "bridge_replay_audit",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("bridge_name", sa.String(200), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("from_seq", sa.BigInteger, nullable=False),
        sa.Column("to_seq", sa.BigInteger, nullable=True),
        sa.Column("filters_json", LongText, nullable=True),
        sa.Column("requested_by", sa.Unicode(255), nullable=False),
        sa.Column("reason", LongText, nullable=True),
        sa.Column("requested_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.Column("applied_at", UtcTimestamp(), nullable=True),
        sa.Column("status", sa.String(32), nullable=False, server_default="pending"),
        sa.PrimaryKeyConstraint("id", name="pk_bridge_replay_audit"),
    )
    op.create_table(
        "bridge_holes",
        sa.Column("bridge_name", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("settled_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.PrimaryKeyConstraint("bridge_name", "seq", name="pk_bridge_holes"),
    )


def downgrade() -> None:
    dialect = dialect_name()
    op.drop_table("bridge_holes")
    op.drop_table("bridge_replay_audit")
    op.drop_table("bridge_offsets")
    if dialect == "mssql":
        op.drop_index("ix_domain_events_row_version", table_name="domain_events")
    # On PostgreSQL this also drops the trigger and the sequence the table owns.
    op.drop_table("domain_events")
    if dialect == "postgresql":
        op.execute("DROP FUNCTION outbox_notify()")
        op.execute("DROP FUNCTION outbox_next_seq()")
