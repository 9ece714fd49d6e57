"""What the store hands out: plain frozen dataclasses, never live ORM rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Required, TypedDict

if TYPE_CHECKING:
    from tempoconf.resolution import ConfigSnapshot

__all__ = [
    "AppliedReport",
    "AppliedState",
    "AuditEntry",
    "AuditEvent",
    "LockRecord",
    "ReportTotals",
    "RolloutRecord",
    "RunConfig",
    "SeenClient",
    "ServedConfig",
    "SnapshotDelta",
    "StageLease",
    "VersionInfo",
]


@dataclass(frozen=True)
class LockRecord:
    """Who holds a config's rollout lock."""

    namespace: str
    path: str
    workflow_id: str
    run_id: str
    version: str
    acquired_at: datetime


@dataclass(frozen=True)
class SnapshotDelta:
    """The configs changed after a revision, as `Store.load_snapshots_since` reads them."""

    revision: int
    """The store's revision the snapshots were read at."""
    changed: Mapping[tuple[str, str], ConfigSnapshot | None]
    """Each config changed since, by (namespace, path): its snapshot now, None when the store
    no longer knows it."""


@dataclass(frozen=True)
class ServedConfig:
    """A config the store knows (it has a version, a stable version, a schema or a lock), as
    configs-as-code compares it (`Store.served_configs`)."""

    namespace: str
    path: str
    stable_version: str | None
    """The stable version id, None when it has none."""
    schema_digest: str | None
    """`tempoconf.canonical.version_id(schema)` of its JSON Schema (the same hash as a value's
    version id), None without a schema."""
    lock: LockRecord | None
    """Who holds its rollout lock (a running rollout), None when free."""


@dataclass(frozen=True)
class RolloutRecord:
    """The active rollout of a config, as the admin API and `status` show it."""

    namespace: str
    path: str
    workflow_id: str
    run_id: str
    version: str
    state: str
    stage_index: int
    """Index of the highest published stage; -1 before the first."""
    started_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class RunConfig:
    """One config a run changes, and the version its lock was taken for (None: the run does not
    hold that config's lock)."""

    namespace: str
    path: str
    version: str | None


@dataclass(frozen=True)
class StageLease:
    index: int
    expires_at: datetime


@dataclass(frozen=True)
class VersionInfo:
    version: str
    author: str
    commit: str
    message: str
    created_at: datetime
    stable_since: list[datetime] = field(default_factory=list)
    """Every time this version became stable, oldest first."""
    is_stable: bool = False


@dataclass(frozen=True)
class AuditEntry:
    id: int
    namespace: str
    path: str
    at: datetime
    actor: str
    action: str
    reason: str
    version: str | None
    workflow_id: str | None
    details: dict[str, Any] = field(default_factory=dict)


class AuditEvent(TypedDict, total=False):
    """What an audit row says besides its config and time (`write_audit`, `Store.record_event`):
    reason "" and the others None when not given. An `event_key` recorded before writes nothing."""

    action: Required[str]
    actor: Required[str]
    reason: str
    version: str | None
    workflow_id: str | None
    event_key: str | None
    details: Mapping[str, Any] | None


@dataclass(frozen=True)
class ReportTotals:
    """One client's reports on one version of a config since a time, under one identity
    (`Store.report_totals`)."""

    client: str
    version: str
    ok: int
    failed: int
    reports: int
    channel: str | None
    labels: dict[str, str] | None
    """The identity the reports named; labels None: they named none (an older client)."""
    seen_channel: str | None = None
    seen_labels: dict[str, str] | None = None
    """The identity the client last polled this config with; labels None: never seen polling."""
    latency_count: int = 0
    latency_sum_ms: float = 0.0
    """The operations the reports timed, and their durations added up in milliseconds (their mean
    latency is latency_sum_ms / latency_count); 0 and 0.0 when none carried a latency."""


@dataclass(frozen=True)
class SeenClient:
    """A client the API saw recently (`Store.record_seen_clients`, `Store.recent_clients`)."""

    client: str
    channel: str | None
    labels: dict[str, str]
    last_seen: datetime
    last_version: str | None = None
    """The version it was last served (polls) or last reported on (report-only clients)."""


@dataclass(frozen=True)
class AppliedReport:
    """A client's report that it applied `version` (error None) or failed to (`error`)."""

    client: str
    version: str
    at: datetime
    error: str | None = None
    channel: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AppliedState:
    """What a client last reported applying (`Store.applied_states`)."""

    client: str
    version: str | None
    """The last version it applied successfully (None: only failures so far)."""
    applied_at: datetime | None
    error: str | None
    """The error of its last failed apply, when that came after its last success."""
    error_version: str | None
    reported_at: datetime
    channel: str | None
    labels: dict[str, str]
