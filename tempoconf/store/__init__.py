"""The store: schemas, versions, stable, rollouts, locks and the audit log (see store.py)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tempoconf.store.records import (
    AppliedReport,
    AppliedState,
    AuditEntry,
    AuditEvent,
    LockRecord,
    ReportTotals,
    RolloutRecord,
    RunConfig,
    SeenClient,
    ServedConfig,
    SnapshotDelta,
    StageLease,
    VersionInfo,
)

if TYPE_CHECKING:
    from tempoconf.store.errors import refused_data
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

# The records are plain dataclasses; the rest is imported on first use (PEP 562), so a module
# that only needs a record (the CLI in API mode, the formatting) does not load SQLAlchemy.
_LAZY = {
    "refused_data": "tempoconf.store.errors",
    **dict.fromkeys(
        (
            "CHANGE_CHANNEL",
            "FreezeActiveError",
            "LockError",
            "LockHeldError",
            "LockLostError",
            "NotFrozenError",
            "Store",
            "StoreSchemaError",
            "UnknownVersionError",
        ),
        "tempoconf.store.store",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = [
    "CHANGE_CHANNEL",
    "AppliedReport",
    "AppliedState",
    "AuditEntry",
    "AuditEvent",
    "FreezeActiveError",
    "LockError",
    "LockHeldError",
    "LockLostError",
    "LockRecord",
    "NotFrozenError",
    "ReportTotals",
    "RolloutRecord",
    "RunConfig",
    "SeenClient",
    "ServedConfig",
    "SnapshotDelta",
    "StageLease",
    "Store",
    "StoreSchemaError",
    "UnknownVersionError",
    "VersionInfo",
    "refused_data",
]
