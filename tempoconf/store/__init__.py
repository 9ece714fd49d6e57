"""The store: schemas, versions, stable, rollouts, locks and the audit log (see store.py)."""

from __future__ import annotations

from tempoconf.store.errors import refused_data
from tempoconf.store.records import (
    AppliedReport,
    AppliedState,
    AuditEntry,
    LockRecord,
    ReportStats,
    ReportTotals,
    RolloutRecord,
    SeenClient,
    StageLease,
    VersionInfo,
)
from tempoconf.store.store import (
    CHANGE_CHANNEL,
    FreezeActiveError,
    LockError,
    LockHeldError,
    LockLostError,
    NotFrozenError,
    Store,
    StoreSchemaError,
    UnknownVersionError,
)

__all__ = [
    "CHANGE_CHANNEL",
    "AppliedReport",
    "AppliedState",
    "AuditEntry",
    "FreezeActiveError",
    "LockError",
    "LockHeldError",
    "LockLostError",
    "LockRecord",
    "NotFrozenError",
    "ReportStats",
    "ReportTotals",
    "RolloutRecord",
    "SeenClient",
    "StageLease",
    "Store",
    "StoreSchemaError",
    "UnknownVersionError",
    "VersionInfo",
    "refused_data",
]
