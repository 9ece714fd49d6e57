"""Initial schema: versions, stable, rollouts, stages, locks, audit log, revision counter."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None

_VERSION_COLUMNS = ["config_version.namespace", "config_version.path", "config_version.version"]


def _key() -> list[sa.Column[str]]:
    return [
        sa.Column("namespace", sa.String(255), primary_key=True, nullable=False),
        sa.Column("path", sa.String(255), primary_key=True, nullable=False),
    ]


def _when(name: str) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    op.create_table(
        "config_schema",
        *_key(),
        sa.Column("document", sa.Text(), nullable=False),
        _when("updated_at"),
        sa.Column("updated_by", sa.Text(), nullable=False),
    )
    op.create_table(
        "config_version",
        *_key(),
        sa.Column("version", sa.String(64), primary_key=True, nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("author", sa.Text(), nullable=False),
        sa.Column("commit", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        _when("created_at"),
    )
    op.create_table(
        "stable",
        *_key(),
        sa.Column("version", sa.String(64), nullable=False),
        _when("updated_at"),
        sa.ForeignKeyConstraint(
            ["namespace", "path", "version"], _VERSION_COLUMNS, name="fk_stable_version"
        ),
    )
    op.create_table(
        "stable_history",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("path", sa.String(255), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        _when("at"),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("workflow_id", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["namespace", "path", "version"], _VERSION_COLUMNS, name="fk_stable_history_version"
        ),
    )
    op.create_index("ix_stable_history_config", "stable_history", ["namespace", "path", "id"])
    op.create_table(
        "rollout",
        *_key(),
        sa.Column("workflow_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("state", sa.String(64), nullable=False),
        sa.Column("stage_index", sa.Integer(), nullable=False),
        _when("started_at"),
        _when("updated_at"),
        sa.ForeignKeyConstraint(
            ["namespace", "path", "version"], _VERSION_COLUMNS, name="fk_rollout_version"
        ),
    )
    op.create_table(
        "rollout_stage",
        *_key(),
        sa.Column(
            "stage_index", sa.Integer(), primary_key=True, autoincrement=False, nullable=False
        ),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=True),
        sa.Column("percentile", sa.Float(), nullable=True),
        sa.Column("labels", sa.Text(), nullable=False),
        _when("expires_at"),
        _when("published_at"),
        sa.ForeignKeyConstraint(
            ["namespace", "path"],
            ["rollout.namespace", "rollout.path"],
            name="fk_rollout_stage_rollout",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "config_lock",
        *_key(),
        sa.Column("workflow_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        _when("acquired_at"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("path", sa.String(255), nullable=False),
        _when("at"),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("action", sa.String(128), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("version", sa.String(64), nullable=True),
        sa.Column("workflow_id", sa.Text(), nullable=True),
        sa.Column("event_key", sa.Text(), nullable=True),
        sa.Column("details", sa.Text(), nullable=False),
        sa.UniqueConstraint("event_key", name="uq_audit_log_event_key"),
    )
    op.create_index("ix_audit_log_config", "audit_log", ["namespace", "path", "id"])
    revision_table = op.create_table(
        "store_revision",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False, nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(revision_table, [{"id": 1, "revision": 0}])


def downgrade() -> None:
    for name in (
        "store_revision",
        "audit_log",
        "config_lock",
        "rollout_stage",
        "rollout",
        "stable_history",
        "stable",
        "config_version",
        "config_schema",
    ):
        op.drop_table(name)
