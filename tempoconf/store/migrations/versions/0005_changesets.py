"""Changesets: a published stage may bucket its percentile by the changeset's key instead of the
config's path, so every client gets all of a changeset's new values or none.

Revision ID: 0005_changesets
Revises: 0004_report_identity
Create Date: 2026-11-30 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_changesets"
down_revision: str | None = "0004_report_identity"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: NULL (every stage of a single-config rollout) buckets by the config's path.
    op.add_column("rollout_stage", sa.Column("bucket_key", sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite drops a column only by copying the table: batch mode does that.
    with op.batch_alter_table("rollout_stage") as batch:
        batch.drop_column("bucket_key")
