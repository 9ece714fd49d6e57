"""Clients the API has seen polling (`Store.record_seen_clients`), for rollout plans."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003_client_seen"
down_revision: str | None = "0002_client_reports"


def upgrade() -> None:
    op.create_table(
        "client_seen",
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("path", sa.String(255), nullable=False),
        sa.Column("client", sa.String(255), nullable=False),
        sa.Column("channel", sa.Text(), nullable=True),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_version", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("namespace", "path", "client"),
    )
    op.create_index("ix_client_seen_config", "client_seen", ["namespace", "path", "last_seen"])
    op.create_index("ix_client_seen_last_seen", "client_seen", ["last_seen"])


def downgrade() -> None:
    op.drop_table("client_seen")
