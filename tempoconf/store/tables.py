"""The store's tables (sqlmodel). Data access lives beside (store.py composes it); migrations/
creates these tables.

JSON payloads (values, schemas, labels, details) are stored as JSON text so both SQLite and
PostgreSQL hold exactly the document that was written.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    DateTime,
    Dialect,
    Double,
    ForeignKeyConstraint,
    Index,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlmodel import Field, SQLModel

__all__ = [
    "AuditLog",
    "ClientApplied",
    "ClientReport",
    "ClientSeen",
    "ConfigChange",
    "ConfigLock",
    "ConfigSchema",
    "ConfigVersion",
    "NamespaceFreeze",
    "Rollout",
    "RolloutStage",
    "Stable",
    "StableHistory",
    "StoreRevision",
    "UTCDateTime",
    "metadata",
    "table",
]


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out; SQLite keeps naive UTC (it drops tzinfo)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(
                f"naive datetime {value!r}: the store takes timezone-aware UTC datetimes"
            )
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class ConfigSchema(SQLModel, table=True):
    __tablename__ = "config_schema"

    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)
    document: str = Field(sa_type=Text)
    updated_at: datetime = Field(sa_type=UTCDateTime)
    updated_by: str = Field(default="", sa_type=Text)


def _references_version(name: str) -> ForeignKeyConstraint:
    """(namespace, path, version) must name a stored version of the config."""
    return ForeignKeyConstraint(
        ["namespace", "path", "version"],
        ["config_version.namespace", "config_version.path", "config_version.version"],
        name=name,
    )


class ConfigVersion(SQLModel, table=True):
    __tablename__ = "config_version"

    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)
    version: str = Field(primary_key=True, max_length=64)
    value: str = Field(sa_type=Text)
    author: str = Field(default="", sa_type=Text)
    commit: str = Field(default="", sa_type=Text)
    message: str = Field(default="", sa_type=Text)
    created_at: datetime = Field(sa_type=UTCDateTime)


class Stable(SQLModel, table=True):
    __tablename__ = "stable"
    __table_args__ = (_references_version("fk_stable_version"),)

    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)
    version: str = Field(max_length=64)
    updated_at: datetime = Field(sa_type=UTCDateTime)


class StableHistory(SQLModel, table=True):
    __tablename__ = "stable_history"
    __table_args__ = (
        _references_version("fk_stable_history_version"),
        Index("ix_stable_history_config", "namespace", "path", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(max_length=255)
    path: str = Field(max_length=255)
    version: str = Field(max_length=64)
    at: datetime = Field(sa_type=UTCDateTime)
    actor: str = Field(default="", sa_type=Text)
    reason: str = Field(default="", sa_type=Text)
    workflow_id: str | None = Field(default=None, sa_type=Text)


class Rollout(SQLModel, table=True):
    """The active rollout of a config (at most one)."""

    __tablename__ = "rollout"
    __table_args__ = (_references_version("fk_rollout_version"),)

    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)
    workflow_id: str = Field(sa_type=Text)
    run_id: str = Field(max_length=255)
    version: str = Field(max_length=64)
    state: str = Field(max_length=64)
    stage_index: int = Field(default=-1)
    started_at: datetime = Field(sa_type=UTCDateTime)
    updated_at: datetime = Field(sa_type=UTCDateTime)


class RolloutStage(SQLModel, table=True):
    """A published stage of the active rollout; its lease ends at expires_at."""

    __tablename__ = "rollout_stage"
    __table_args__ = (
        ForeignKeyConstraint(
            ["namespace", "path"],
            ["rollout.namespace", "rollout.path"],
            name="fk_rollout_stage_rollout",
            ondelete="CASCADE",
        ),
    )

    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)
    stage_index: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    run_id: str = Field(max_length=255)
    name: str = Field(sa_type=Text)
    channel: str | None = Field(default=None, sa_type=Text)
    percentile: float | None = Field(default=None)
    labels: str = Field(default="{}", sa_type=Text)
    expires_at: datetime = Field(sa_type=UTCDateTime)
    published_at: datetime = Field(sa_type=UTCDateTime)
    bucket_key: str | None = Field(default=None, sa_type=Text)
    """What the percentile buckets by: NULL for the config's path, a changeset's key otherwise."""


class ConfigLock(SQLModel, table=True):
    """Who may run a rollout of a config: one workflow run at a time."""

    __tablename__ = "config_lock"

    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)
    workflow_id: str = Field(sa_type=Text)
    run_id: str = Field(max_length=255)
    version: str = Field(max_length=64)
    acquired_at: datetime = Field(sa_type=UTCDateTime)


class AuditLog(SQLModel, table=True):
    __tablename__ = "audit_log"
    __table_args__ = (
        UniqueConstraint("event_key", name="uq_audit_log_event_key"),
        Index("ix_audit_log_config", "namespace", "path", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(max_length=255)
    path: str = Field(max_length=255)
    at: datetime = Field(sa_type=UTCDateTime)
    actor: str = Field(default="", sa_type=Text)
    action: str = Field(max_length=128)
    reason: str = Field(default="", sa_type=Text)
    version: str | None = Field(default=None, max_length=64)
    workflow_id: str | None = Field(default=None, sa_type=Text)
    event_key: str | None = Field(default=None, sa_type=Text)
    details: str = Field(default="{}", sa_type=Text)


class ClientReport(SQLModel, table=True):
    """One health report of a client on the version it runs (POST /v1/reports)."""

    __tablename__ = "client_report"
    __table_args__ = (
        Index("ix_client_report_config", "namespace", "path", "received_at"),
        Index("ix_client_report_received_at", "received_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(max_length=255)
    path: str = Field(max_length=255)
    version: str = Field(max_length=64)
    client: str = Field(max_length=255)
    ok: int = Field(default=0, sa_type=BigInteger)
    failed: int = Field(default=0, sa_type=BigInteger)
    error: str | None = Field(default=None, sa_type=Text)
    received_at: datetime = Field(sa_type=UTCDateTime)
    channel: str | None = Field(default=None, sa_type=Text)
    labels: str | None = Field(default=None, sa_type=Text)
    """The client's labels as JSON; NULL (with channel NULL) when the report named no identity."""
    latency_count: int = Field(
        default=0, sa_type=BigInteger, sa_column_kwargs={"server_default": "0"}
    )
    """How many operations the report timed; 0 when it carries no latency."""
    latency_sum_ms: float = Field(
        default=0.0, sa_type=Double, sa_column_kwargs={"server_default": "0"}
    )
    """The timed operations' durations added up, in milliseconds."""


class ClientSeen(SQLModel, table=True):
    """A client identity the API served (from its polls), kept to count who a stage would reach."""

    __tablename__ = "client_seen"
    __table_args__ = (
        Index("ix_client_seen_config", "namespace", "path", "last_seen"),
        Index("ix_client_seen_last_seen", "last_seen"),
    )

    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)
    client: str = Field(primary_key=True, max_length=255)
    channel: str | None = Field(default=None, sa_type=Text)
    labels: str = Field(default="{}", sa_type=Text)
    last_seen: datetime = Field(sa_type=UTCDateTime)
    last_version: str | None = Field(default=None, max_length=64)


class NamespaceFreeze(SQLModel, table=True):
    """A freeze of a namespace (tempoconf.gates.freezes): active while not ended and before `until`."""

    __tablename__ = "namespace_freeze"
    __table_args__ = (Index("ix_namespace_freeze_namespace", "namespace", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(max_length=255)
    reason: str = Field(sa_type=Text)
    started_by: str = Field(sa_type=Text)
    started_at: datetime = Field(sa_type=UTCDateTime)
    until: datetime | None = Field(default=None, sa_type=UTCDateTime)
    ended_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    ended_by: str | None = Field(default=None, sa_type=Text)
    end_reason: str = Field(default="", sa_type=Text)


class ClientApplied(SQLModel, table=True):
    """The version a client last reported as applied (written, and its reload succeeded), and
    the error of its last failed apply: what a stage's `min_applied` gate counts."""

    __tablename__ = "client_applied"
    __table_args__ = (Index("ix_client_applied_reported_at", "reported_at"),)

    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)
    client: str = Field(primary_key=True, max_length=255)
    version: str | None = Field(default=None, max_length=64)
    """The last version applied successfully (None: none yet, only failures)."""
    applied_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    error: str | None = Field(default=None, sa_type=Text)
    """The error of the last failed apply, if it came after the last success."""
    error_version: str | None = Field(default=None, max_length=64)
    """The version whose apply failed with `error`."""
    reported_at: datetime = Field(sa_type=UTCDateTime)
    channel: str | None = Field(default=None, sa_type=Text)
    labels: str = Field(default="{}", sa_type=Text)


class StoreRevision(SQLModel, table=True):
    """One row (id 1): the change counter the API polls."""

    __tablename__ = "store_revision"

    id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    revision: int = Field(default=0, sa_type=BigInteger)
    change_floor: int = Field(
        default=0, sa_type=BigInteger, sa_column_kwargs={"server_default": "0"}
    )
    """config_change holds every change made after this revision (the highest pruned, or the
    revision the change log started at)."""


class ConfigChange(SQLModel, table=True):
    """The change log: a config a revision changed (a revision that changed several has a row
    for each). Kept for the last CHANGE_LOG_RETENTION revisions (tempoconf/store/change_log.py)."""

    __tablename__ = "config_change"
    # No index besides the primary key: its first column, revision, serves the range reads and
    # the pruning (a second index on revision alone would only cost every write).

    revision: int = Field(
        primary_key=True, sa_type=BigInteger, sa_column_kwargs={"autoincrement": False}
    )
    namespace: str = Field(primary_key=True, max_length=255)
    path: str = Field(primary_key=True, max_length=255)


metadata = SQLModel.metadata


def table(model: type[SQLModel]) -> Table:
    """The Core table of a model (the store speaks Core for upserts and compare-and-set updates)."""
    return cast(Table, cast(Any, model).__table__)
