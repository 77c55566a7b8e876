"""SQL Server: a writer holds an active rowversion before it draws its seq (ticket, then SEQUENCE).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

SQLite and PostgreSQL: nothing changes.

SQL Server, the defect: revision 0001 made `seq` an IDENTITY, drawn when the row is built, before the
row's `rowversion` is stamped. Writer A takes seq 41 and stalls before its stamp; B takes 42 and
commits; the bridge sees the hole at 41 and marks it with `@@DBTS + 1`; A then stamps at or above the
mark, so a later read finds `MIN_ACTIVE_ROWVERSION()` past the mark and settles 41 as a hole while A
is still open. A commits an event that is never published.

The fix is the order PostgreSQL already has (`outbox_next_seq()`: transaction id before `nextval`).
An INSTEAD OF INSERT trigger on `domain_events` runs for every INSERT (plain SQL from any language,
`INSERT ... SELECT`, MERGE's insert action) and, per statement:

1. inserts a ticket row into `outbox_seq_tickets`, which has a rowversion column. From then on the
   transaction holds an active rowversion R, and `MIN_ACTIVE_ROWVERSION()` stays at or below R until
   it commits or rolls back. The transaction never deletes or updates its ticket, so this holds
   whether "active" is read as a value used by an open transaction or as a row not yet committed;
2. only then draws the statement's seqs from the SEQUENCE `domain_events_seq` and inserts the rows
   (an INSTEAD OF trigger's own INSERT into its table does not fire it again). A client-supplied
   seq is ignored: every seq comes from here;
3. deletes this session's tickets that the horizon has passed (`stamped < MIN_ACTIVE_ROWVERSION()`:
   their transactions have ended), so the table stays as small as the number of open writers plus
   what a long transaction holds back. Only its own session's rows: no blocking between writers, and
   no update conflicts for writers under SNAPSHOT isolation.

Why that settles no live seq: a hole at S is seen by a read whose rows include some S' > S, so S' was
drawn and committed before that read; the SEQUENCE hands out values in increasing order across all
sessions (one in-memory counter per sequence, even with CACHE), so S was drawn earlier still, after
its writer's ticket R. The mark, `@@DBTS + 1` taken after that read, is therefore above R, and
while the writer is open `MIN_ACTIVE_ROWVERSION()` <= R < mark: the hole cannot settle until the
writer has ended, and the first read that may settle it starts afterwards and sees S if it committed.
One ticket per statement is enough for a multi-row `INSERT ... SELECT`: every seq of the statement is
drawn after the same R. (One per transaction would be too; the trigger cannot cheaply tell whether
its transaction already holds one, and a ticket costs one small insert.) CACHE is safe here, unlike a
per-session PostgreSQL cache: it only loses unused values on an unclean shutdown, leaving gaps that no
writer holds, which settle as holes.

Within one multi-row statement the seqs follow (occurred_at, event_id): `inserted` keeps no VALUES
order. `bridge.writer` sends one statement per event so its list order is the seq order.

Also: `seq` gets a placeholder DEFAULT 0 (an INSERT must otherwise name every NOT NULL column without a
default, trigger or not) and the CHECK `seq > 0`, so an INSERT that bypasses the trigger (trigger
disabled) fails loudly instead of landing below the bridge's cursor. Bulk loads (bcp, BULK INSERT,
SqlBulkCopy) skip triggers and CHECK constraints unless told: load the outbox with FIRE_TRIGGERS.
`OUTPUT inserted.seq` cannot return the seq (SQL Server refuses OUTPUT without INTO on a table with a
trigger; with INTO it reports the placeholder): read it back by event_id. An error inside the trigger
(a duplicate event_id) rolls back the whole transaction, not only the statement. A MERGE into
domain_events may only have an insert action.

SQL Server cannot drop the IDENTITY property, so the upgrade moves the table aside (renaming it and
its constraints), creates the new `domain_events`, moves the rows across with `ALTER TABLE ... SWITCH`
(metadata only; SWITCH ignores the IDENTITY property), starts the SEQUENCE above every value
the IDENTITY ever handed out (a settled hole must never be reused), re-grants the old table's
permissions on the new one and drops the old one. Its schema locks make writers and the bridge wait
until the migration commits. The downgrade does the reverse and reseeds the IDENTITY above the
SEQUENCE. Needs SQL Server 2017 or later (STRING_AGG) or Azure SQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mssql

from bridge.schema import (
    EVENT_ID_UNIQUE,
    MSSQL_SEQ_CHECK,
    MSSQL_SEQ_SEQUENCE,
    MSSQL_SEQ_TRIGGER,
    MSSQL_TICKETS,
    LongText,
    UtcTimestamp,
    utc_now,
)

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

SUPPORTED = ("sqlite", "postgresql", "mssql")

#: How many sequence values SQL Server keeps in memory; an unclean shutdown loses at most these.
SEQUENCE_CACHE = 50
#: At most this many finished tickets a statement deletes, so one insert after a long-held horizon
#: does not pay for the whole backlog at once.
TICKETS_FORGOTTEN_PER_STATEMENT = 100

#: The columns the INSERT in the trigger names: every column of domain_events but the rowversion.
_EVENT_COLUMNS = (
    "event_id",
    "aggregate_type",
    "aggregate_id",
    "event_type",
    "payload",
    "headers",
    "occurred_at",
    "schema_version",
)

TRIGGER = f"""
CREATE TRIGGER {MSSQL_SEQ_TRIGGER} ON domain_events
INSTEAD OF INSERT
AS
BEGIN
    SET NOCOUNT ON;
    -- NEXT VALUE FOR is refused while a caller's SET ROWCOUNT is in force; this lasts to the trigger's end.
    SET ROWCOUNT 0;
    IF NOT EXISTS (SELECT 1 FROM inserted) RETURN;

    -- 1. Stamp first: this live ticket gives the transaction an active rowversion, which holds
    --    MIN_ACTIVE_ROWVERSION() at or below it until the transaction ends (see revision 0002).
    INSERT INTO {MSSQL_TICKETS} DEFAULT VALUES;

    -- 2. Only now draw the seqs, every one of this statement after the stamp. Any seq in the
    --    statement is ignored.
    INSERT INTO domain_events (seq, {", ".join(_EVENT_COLUMNS)})
    SELECT NEXT VALUE FOR {MSSQL_SEQ_SEQUENCE} OVER (ORDER BY i.occurred_at, i.event_id),
           i.event_id, i.aggregate_type, i.aggregate_id, i.event_type, i.payload, i.headers,
           COALESCE(i.occurred_at, SYSUTCDATETIME()), COALESCE(i.schema_version, 1)
    FROM inserted AS i;

    -- 3. Forget this session's tickets whose transactions have ended (below the horizon). Never this
    --    transaction's own, which are at or above MIN_ACTIVE_ROWVERSION() until it ends.
    DELETE TOP ({TICKETS_FORGOTTEN_PER_STATEMENT}) FROM {MSSQL_TICKETS}
    WHERE session_id = @@SPID AND stamped < MIN_ACTIVE_ROWVERSION();
END
"""

# Both numbers are read after the SWITCH, whose schema locks keep every writer out until commit.
CREATE_SEQUENCE = f"""
DECLARE @identity BIGINT = (SELECT CONVERT(BIGINT, last_value) FROM sys.identity_columns
                            WHERE object_id = OBJECT_ID(N'domain_events_0001') AND name = N'seq');
DECLARE @highest BIGINT = (SELECT MAX(seq) FROM domain_events);
DECLARE @drawn BIGINT = CASE WHEN COALESCE(@identity, 0) > COALESCE(@highest, 0)
                             THEN COALESCE(@identity, 0) ELSE COALESCE(@highest, 0) END;
DECLARE @ddl NVARCHAR(400) = N'CREATE SEQUENCE {MSSQL_SEQ_SEQUENCE} AS BIGINT START WITH '
    + CONVERT(NVARCHAR(20), @drawn + 1)
    + N' INCREMENT BY 1 MINVALUE 1 NO CYCLE CACHE {SEQUENCE_CACHE}';
EXEC sp_executesql @ddl
"""

# The next IDENTITY value lands above anything the SEQUENCE may have handed out (current_value is the
# last value issued, or the start value if none was: then one seq is skipped, a hole nobody holds).
RESEED_IDENTITY = f"""
DECLARE @sequence BIGINT = (SELECT CONVERT(BIGINT, current_value) FROM sys.sequences
                            WHERE object_id = OBJECT_ID(N'{MSSQL_SEQ_SEQUENCE}'));
DECLARE @highest BIGINT = (SELECT MAX(seq) FROM domain_events);
DECLARE @next BIGINT = 1 + CASE WHEN COALESCE(@sequence, 0) > COALESCE(@highest, 0)
                                THEN COALESCE(@sequence, 0) ELSE COALESCE(@highest, 0) END;
DBCC CHECKIDENT (N'domain_events', RESEED, @next) WITH NO_INFOMSGS
"""


def copy_permissions(old_table: str) -> str:
    """T-SQL that grants (and denies) on `domain_events` what was granted on `old_table`, so writers
    keep their INSERT permission across the table swap."""
    return f"""
DECLARE @grants NVARCHAR(MAX) = (
    SELECT STRING_AGG(CONVERT(NVARCHAR(MAX),
               CASE p.state WHEN 'D' THEN N'DENY ' ELSE N'GRANT ' END + p.permission_name
               + N' ON ' + QUOTENAME(OBJECT_SCHEMA_NAME(p.major_id)) + N'.domain_events'
               + CASE WHEN p.minor_id = 0 THEN N''
                      ELSE N' (' + QUOTENAME(COL_NAME(p.major_id, p.minor_id)) + N')' END
               + N' TO ' + QUOTENAME(USER_NAME(p.grantee_principal_id))
               + CASE p.state WHEN 'W' THEN N' WITH GRANT OPTION' ELSE N'' END), N'; ')
    FROM sys.database_permissions AS p
    WHERE p.class = 1 AND p.major_id = OBJECT_ID(N'{old_table}'));
IF @grants IS NOT NULL EXEC sp_executesql @grants
"""


def rename_constraint(table: str, old: str, new: str) -> str:
    # sp_rename wants a constraint as schema.constraint; the schema is the table's.
    return f"""
DECLARE @constraint NVARCHAR(600) = QUOTENAME(OBJECT_SCHEMA_NAME(OBJECT_ID(N'{table}'))) + N'.{old}';
EXEC sp_rename @constraint, N'{new}', N'OBJECT'
"""


def dialect_name() -> str:
    name = op.get_context().dialect.name
    if name not in SUPPORTED:
        raise NotImplementedError(f"the outbox migrations support {', '.join(SUPPORTED)}, not {name}")
    return name


def move_aside(suffix: str) -> str:
    """Rename domain_events, its constraints and its index to `..._<suffix>`; returns the new table name."""
    aside = f"domain_events_{suffix}"
    op.rename_table("domain_events", aside)
    op.execute(rename_constraint(aside, "pk_domain_events", f"pk_domain_events_{suffix}"))
    op.execute(rename_constraint(aside, EVENT_ID_UNIQUE, f"uq_domain_events_{suffix}_event_id"))
    op.execute(
        f"EXEC sp_rename N'{aside}.ix_domain_events_row_version', "
        f"N'ix_domain_events_{suffix}_row_version', N'INDEX'"
    )
    return aside


def create_events_table(seq: sa.Column[int]) -> None:
    """domain_events exactly as revision 0001 built it on SQL Server, but for `seq`: SWITCH needs the
    same columns in the same order, and the same indexes."""
    op.create_table(
        "domain_events",
        seq,
        sa.Column("event_id", sa.Unicode(100), nullable=False),
        sa.Column("aggregate_type", sa.Unicode(255), nullable=False),
        sa.Column("aggregate_id", sa.Unicode(255), nullable=False),
        sa.Column("event_type", sa.Unicode(255), nullable=False),
        sa.Column("payload", LongText, nullable=False),
        sa.Column("headers", LongText, nullable=True),
        sa.Column("occurred_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.Column("schema_version", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("row_version", mssql.ROWVERSION(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_domain_events"),
        sa.UniqueConstraint("event_id", name=EVENT_ID_UNIQUE),
    )
    op.create_index("ix_domain_events_row_version", "domain_events", ["row_version"])


def upgrade() -> None:
    if dialect_name() != "mssql":
        return
    aside = move_aside("0001")
    # The placeholder DEFAULT lets an INSERT leave seq out; the trigger replaces it (see above).
    create_events_table(sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False,
                                  server_default=sa.text("0")))
    op.execute(f"ALTER TABLE {aside} SWITCH TO domain_events")  # the rows move; metadata only
    op.execute(CREATE_SEQUENCE)
    op.execute(copy_permissions(aside))
    op.drop_table(aside)
    op.execute(f"ALTER TABLE domain_events WITH CHECK ADD CONSTRAINT {MSSQL_SEQ_CHECK} CHECK (seq > 0)")

    op.create_table(
        MSSQL_TICKETS,
        # Which session holds a ticket: with stamped, names the writer holding the horizon back
        # (the ticket whose stamp is MIN_ACTIVE_ROWVERSION()) without VIEW SERVER STATE.
        sa.Column("session_id", sa.SmallInteger, nullable=False, server_default=sa.text("@@SPID")),
        sa.Column("stamped", mssql.ROWVERSION(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "stamped", name=f"pk_{MSSQL_TICKETS}"),
    )
    # A table lock here would make every outbox writer wait for one transaction; row locks never
    # conflict (each session touches only its own tickets).
    op.execute(f"ALTER TABLE {MSSQL_TICKETS} SET (LOCK_ESCALATION = DISABLE)")
    op.execute(TRIGGER)


def downgrade() -> None:
    if dialect_name() != "mssql":
        return
    op.execute(f"DROP TRIGGER {MSSQL_SEQ_TRIGGER}")
    op.drop_table(MSSQL_TICKETS)
    op.execute(f"ALTER TABLE domain_events DROP CONSTRAINT {MSSQL_SEQ_CHECK}")
    aside = move_aside("0002")
    create_events_table(sa.Column("seq", sa.BigInteger, sa.Identity(start=1, increment=1), primary_key=True))
    op.execute(f"ALTER TABLE {aside} SWITCH TO domain_events")
    op.execute(RESEED_IDENTITY)
    op.execute(copy_permissions(aside))
    op.drop_table(aside)
    op.execute(f"DROP SEQUENCE {MSSQL_SEQ_SEQUENCE}")
