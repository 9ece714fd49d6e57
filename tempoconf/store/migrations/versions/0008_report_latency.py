"""The latency a health report carries (how many operations it timed, their durations added up in
milliseconds), so a health check can compare a cohort's mean latency with the baseline's."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008_report_latency"
down_revision: str | None = "0007_applied_versions"


def upgrade() -> None:
    # NOT NULL with a server default: reports stored before this migration, and the inserts of a
    # previous version still running during an upgrade, carry no latency (0 timed operations).
    op.add_column(
        "client_report",
        sa.Column("latency_count", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.add_column(
        "client_report",
        sa.Column("latency_sum_ms", sa.Double(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    # SQLite drops a column only by copying the table: batch mode does that.
    with op.batch_alter_table("client_report") as batch:
        batch.drop_column("latency_sum_ms")
        batch.drop_column("latency_count")
