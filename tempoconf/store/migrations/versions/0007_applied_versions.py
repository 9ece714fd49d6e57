"""The version each client last applied (`POST /v1/reports` with `applied`), for the gates on
applied versions (a stage's `min_applied`) and `tempoconf clients --not-applied`."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007_applied_versions"
down_revision: str | None = "0006_freezes"


def upgrade() -> None:
    op.create_table(
        "client_applied",
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("path", sa.String(255), nullable=False),
        sa.Column("client", sa.String(255), nullable=False),
        sa.Column("version", sa.String(64), nullable=True),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_version", sa.String(64), nullable=True),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("channel", sa.Text(), nullable=True),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "path", "client"),
    )
    op.create_index("ix_client_applied_reported_at", "client_applied", ["reported_at"])


def downgrade() -> None:
    op.drop_table("client_applied")
