"""What a valid rollout request would do, read from the store and nothing written: the version,
the stable value it replaces, the lock in its way, the change summary. `rollout plan` and `rollout
start` show it; the admin API answers it (`POST /v1/admin/plans`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tempoconf.change import rollout_change
from tempoconf.request import RolloutRequest
from tempoconf.resolution import VersionRecord
from tempoconf.store.records import LockRecord
from tempoconf.validation import ValidatedRollout

__all__ = ["PreviewLookup", "RolloutPreview", "preview_rollout"]


class PreviewLookup(Protocol):
    """What a preview reads of a config (the Store has all three)."""

    def get_stable(self, namespace: str, path: str) -> VersionRecord | None: ...

    def get_version(self, namespace: str, path: str, version: str) -> VersionRecord | None: ...

    def get_lock(self, namespace: str, path: str) -> LockRecord | None: ...


@dataclass(frozen=True)
class RolloutPreview:
    """A valid rollout request and what it would do: checked exactly as the workflow's prepare
    step checks it, nothing stored or started."""

    request: RolloutRequest
    version: str
    version_exists: bool
    value: Any
    """The value it rolls out (a rollback's stored value)."""
    stable: VersionRecord | None
    lock: LockRecord | None
    change: str


def preview_rollout(validated: ValidatedRollout, lookup: PreviewLookup) -> RolloutPreview:
    request, version = validated.request, validated.version
    namespace, path = request.namespace, request.path
    stable = lookup.get_stable(namespace, path)
    rollback_to = version if validated.existing is not None else None
    return RolloutPreview(
        request=request,
        version=version,
        version_exists=lookup.get_version(namespace, path, version) is not None,
        value=validated.value,
        stable=stable,
        lock=lookup.get_lock(namespace, path),
        change=rollout_change(validated.value, stable, rollback_to=rollback_to),
    )
