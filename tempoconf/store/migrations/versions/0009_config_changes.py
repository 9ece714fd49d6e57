"""The change log: which configs each revision changed (`config_change`), so the API reloads only
those configs' snapshots instead of every config's, and the revision below which it is pruned."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009_config_changes"
down_revision: str | None = "0008_report_latency"


def upgrade() -> None:
    op.create_table(
        "config_change",
        sa.Column("revision", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("path", sa.String(255), nullable=False),
        # Its first column serves the reads by revision and the pruning: no other index.
        sa.PrimaryKeyConstraint("revision", "namespace", "path"),
    )
    # NOT NULL with a server default: the previous version's writers do not name it.
    op.add_column(
        "store_revision",
        sa.Column("change_floor", sa.BigInteger(), nullable=False, server_default="0"),
    )
    # The log starts empty: it holds every change after the revision the store is at now.
    op.execute("UPDATE store_revision SET change_floor = revision")


def downgrade() -> None:
    # SQLite drops a column only by copying the table: batch mode does that.
    with op.batch_alter_table("store_revision") as batch:
        batch.drop_column("change_floor")
    op.drop_table("config_change")
