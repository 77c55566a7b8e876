"""Drop `bridge_holes`: nothing ever wrote it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

Revision 0001 created the table for settled holes, but the bridge never wrote it. The bridge now
remembers its recently settled holes in memory (`bridge.core.late`) and rewinds to publish a row that
appears in one; a table that nothing feeds only misleads, so it goes. The downgrade brings it back empty.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from bridge.schema import UtcTimestamp, utc_now

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.drop_table("bridge_holes")


def downgrade() -> None:
    op.create_table(
        "bridge_holes",
        sa.Column("bridge_name", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("settled_at", UtcTimestamp(), nullable=False, server_default=utc_now()),
        sa.PrimaryKeyConstraint("bridge_name", "seq", name="pk_bridge_holes"),
    )
