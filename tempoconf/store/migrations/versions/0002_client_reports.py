"""Client health reports (POST /v1/reports), read by the `reports` health check."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002_client_reports"
down_revision: str | None = "0001_initial"


def upgrade() -> None:
    op.create_table(
        "client_report",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("path", sa.String(255), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("client", sa.String(255), nullable=False),
        sa.Column("ok", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_client_report_config", "client_report", ["namespace", "path", "received_at"]
    )
    op.create_index("ix_client_report_received_at", "client_report", ["received_at"])


def downgrade() -> None:
    op.drop_table("client_report")
