"""Changesets: a published stage may bucket its percentile by the changeset's key instead of the
config's path, so every client gets all of a changeset's new values or none."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005_changesets"
down_revision: str | None = "0004_report_identity"


def upgrade() -> None:
    # Nullable: NULL (every stage of a single-config rollout) buckets by the config's path.
    op.add_column("rollout_stage", sa.Column("bucket_key", sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite drops a column only by copying the table: batch mode does that.
    with op.batch_alter_table("rollout_stage") as batch:
        batch.drop_column("bucket_key")
