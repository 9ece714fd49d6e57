"""The store: schemas, versions, stable, rollouts, locks and the audit log (see store.py)."""

from __future__ import annotations

from tempoconf.store.records import AuditEntry, LockRecord, RolloutRecord, StageLease, VersionInfo
from tempoconf.store.store import (
    LockError,
    LockHeldError,
    LockLostError,
    Store,
    UnknownVersionError,
)

__all__ = [
    "AuditEntry",
    "LockError",
    "LockHeldError",
    "LockLostError",
    "LockRecord",
    "RolloutRecord",
    "StageLease",
    "Store",
    "UnknownVersionError",
    "VersionInfo",
]
