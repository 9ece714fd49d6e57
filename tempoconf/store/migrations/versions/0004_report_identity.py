"""The identity a client reported with (channel, labels), so a health check can tell which
stage's cohort a report belongs to."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004_report_identity"
down_revision: str | None = "0003_client_seen"


def upgrade() -> None:
    # Both nullable: reports stored before this migration (and reports that name no identity)
    # carry none, and the health check falls back to what the client polled with.
    op.add_column("client_report", sa.Column("channel", sa.Text(), nullable=True))
    op.add_column("client_report", sa.Column("labels", sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite drops a column only by copying the table: batch mode does that.
    with op.batch_alter_table("client_report") as batch:
        batch.drop_column("labels")
        batch.drop_column("channel")
