"""Keep what is owed: dead letters, a record of what cleanup deleted, retired bridge names; and instances.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27

- `bridge_dead_letters`: each poison row a bridge name sent to its dead-letter topic. Retention and
  `cleanup` keep a row while a dead letter for it is open; an operator resolves or republishes it.
- `bridge_deletions`: what retention and `cleanup` deleted, per run. A bridge whose watermark is below a
  run's `through_seq` refuses to lead rather than pass the deleted rows over as rolled-back holes.
- `bridge_offsets.retired_at` and `.retired_reason`: a retired name no longer holds retention back.
- `bridge_instances`: each running instance's state (starting, and which step keeps failing; standing by;
  leading), for `status` and `doctor`.

Releases before this revision deleted rows below one name's watermark and recorded nothing. The upgrade
records what is already gone as one run "before revision 0004": every seq below the lowest row still in
the outbox or, with the outbox empty, every seq the database has drawn. A name whose watermark is below
it may have lost rows to that older cleanup, so it too refuses until told where to start. (On a fresh
outbox nothing is drawn yet and nothing is recorded.)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from bridge.schema import MSSQL_SEQ_SEQUENCE, SEQ_SEQUENCE, LongText, UtcTimestamp, utc_now

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

#: `bridge_deletions.deleted_by` of what the upgrade found already gone.
BEFORE_0004 = "before revision 0004 (deleted by an older release, or never committed)"

#: The highest seq the database has drawn, per dialect (NULL or 0 when none).
_LAST_DRAWN = {
    "postgresql": f"(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {SEQ_SEQUENCE})",
    "sqlite": "(SELECT seq FROM sqlite_sequence WHERE name = 'domain_events')",
    "mssql": f"(SELECT CAST(last_used_value AS BIGINT) FROM sys.sequences WHERE name = '{MSSQL_SEQ_SEQUENCE}')",
}
_NOW = {"postgresql": "now()", "sqlite": "strftime('%Y-%m-%dT%H:%M:%f000Z', 'now')", "mssql": "SYSUTCDATETIME()"}


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    # Plain ALTER TABLE ... ADD, which SQLite takes too (no batch copy: `migrate --sql` works offline).
    op.add_column("bridge_offsets", sa.Column("retired_at", UtcTimestamp(), nullable=True))
    op.add_column("bridge_offsets", sa.Column("retired_reason", LongText, nullable=True))
    op.create_table(
        "bridge_dead_letters",
        sa.Column("bridge_name", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("event_id", sa.Unicode(100), nullable=False),
        sa.Column("aggregate_type", sa.Unicode(255), nullable=False),
        sa.Column("aggregate_id", sa.Unicode(255), nullable=False),
        sa.Column("reason", LongText, nullable=False),
        sa.Column("dead_letter_topic", sa.Unicode(255), nullable=False),
        sa.Column("payload_bytes", sa.BigInteger, nullable=False),
        sa.Column("payload_truncated", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("dead_lettered_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.Column("status", sa.String(16), nullable=False, server_default="open"),
        sa.Column("resolved_at", UtcTimestamp(), nullable=True),
        sa.Column("resolved_by", sa.Unicode(255), nullable=True),
        sa.Column("resolution", LongText, nullable=True),
        sa.PrimaryKeyConstraint("bridge_name", "seq", name="pk_bridge_dead_letters"),
    )
    op.create_table(
        "bridge_deletions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("first_seq", sa.BigInteger, nullable=False),
        sa.Column("through_seq", sa.BigInteger, nullable=False),
        sa.Column("row_count", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("deleted_by", sa.Unicode(255), nullable=False),
        sa.Column("started_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.Column("finished_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.PrimaryKeyConstraint("id", name="pk_bridge_deletions"),
    )
    op.create_index("ix_bridge_deletions_through_seq", "bridge_deletions", ["through_seq"])
    op.create_table(
        "bridge_instances",
        sa.Column("bridge_name", sa.String(200), nullable=False),
        sa.Column("instance", sa.Unicode(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("step", sa.Unicode(64), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("failing_since", UtcTimestamp(), nullable=True),
        sa.Column("error", LongText, nullable=True),
        sa.Column("updated_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.PrimaryKeyConstraint("bridge_name", "instance", name="pk_bridge_instances"),
    )
    # What an older release already deleted: in SQL, so `migrate --sql` carries it too. row_count is unknown
    # (0); first_seq is 1.
    op.execute(
        "INSERT INTO bridge_deletions (first_seq, through_seq, row_count, deleted_by, started_at, finished_at) "
        f"SELECT 1, gone, 0, '{BEFORE_0004}', {_NOW[dialect]}, {_NOW[dialect]} FROM "
        f"(SELECT COALESCE((SELECT MIN(seq) - 1 FROM domain_events), {_LAST_DRAWN[dialect]}, 0) AS gone) found "
        "WHERE gone > 0"
    )


def downgrade() -> None:
    op.drop_table("bridge_instances")
    op.drop_index("ix_bridge_deletions_through_seq", table_name="bridge_deletions")
    op.drop_table("bridge_deletions")
    op.drop_table("bridge_dead_letters")
    # SQLite 3.35 and later drop a column in place.
    op.drop_column("bridge_offsets", "retired_reason")
    op.drop_column("bridge_offsets", "retired_at")
