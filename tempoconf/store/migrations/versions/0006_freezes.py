"""Freezes of a namespace (`tempoconf freeze start|end|list`): while one is active no rollout in
the namespace widens or promotes."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006_freezes"
down_revision: str | None = "0005_changesets"


def upgrade() -> None:
    op.create_table(
        "namespace_freeze",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("started_by", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_by", sa.Text(), nullable=True),
        sa.Column("end_reason", sa.Text(), nullable=False, server_default=""),
    )
    op.create_index("ix_namespace_freeze_namespace", "namespace_freeze", ["namespace", "id"])


def downgrade() -> None:
    op.drop_table("namespace_freeze")
