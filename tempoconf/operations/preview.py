"""What a valid rollout request would do, read from the store and nothing written: the version,
the stable value it replaces, the lock in its way, the change summary. `rollout plan` and `rollout
start` show it; the admin API answers it (`POST /v1/admin/plans`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tempoconf.resolution import VersionRecord
from tempoconf.rollout.change import (
    ConfigChange,
    rollout_change,
    workflow_details,
    workflow_summary,
)
from tempoconf.rollout.request import RolloutRequest
from tempoconf.store.records import LockRecord

if TYPE_CHECKING:  # the type only: validation loads jsonschema, which a preview never runs
    from tempoconf.rollout.validation import ValidatedRollout

__all__ = ["ChangePreview", "PreviewLookup", "RolloutPreview", "preview_rollout"]


class PreviewLookup(Protocol):
    """What a preview reads of a config (the Store has all three)."""

    def get_stable(self, namespace: str, path: str) -> VersionRecord | None: ...

    def get_version(self, namespace: str, path: str, version: str) -> VersionRecord | None: ...

    def get_lock(self, namespace: str, path: str) -> LockRecord | None: ...


@dataclass(frozen=True)
class ChangePreview:
    """One config of a changeset, as its preview says it."""

    namespace: str
    path: str
    version: str
    stable_version: str | None
    change: str
    value: Any = None
    """The value it rolls out (a rollback's stored value)."""
    stable_value: Any = None
    """Its stable version's value (None also when it has none: see `stable_version`)."""
    version_exists: bool = False
    """The version is stored already (reused, or a rollback's)."""


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
    """The lock in the way: a changeset's first config whose lock is held."""
    change: str
    changes: tuple[ChangePreview, ...] = ()
    """A changeset's configs (empty for a single config)."""

    def _config_changes(self) -> list[ConfigChange]:
        return [(f"{c.namespace}/{c.path}", c.version, c.change) for c in self.changes]

    def summary(self) -> str:
        """The workflow's static summary (the Web UI's Summary column): every config's change."""
        request = self.request
        return workflow_summary(
            request.namespace,
            request.path,
            self.version,
            self.change,
            changes=self._config_changes(),
        )

    def details(self) -> str:
        """The workflow's static details (the Web UI's Details): every config, version, change."""
        return workflow_details(
            self.request, self.version, self.change, changes=self._config_changes()
        )


def preview_rollout(validated: ValidatedRollout, lookup: PreviewLookup) -> RolloutPreview:
    request, version = validated.request, validated.version
    namespace, path = request.namespace, request.path
    stable = lookup.get_stable(namespace, path)
    rollback_to = version if validated.existing is not None else None
    lock = lookup.get_lock(namespace, path)
    changes: list[ChangePreview] = []
    for change in validated.changes:
        its_stable = lookup.get_stable(change.namespace, change.path)
        lock = lock or lookup.get_lock(change.namespace, change.path)
        changes.append(
            ChangePreview(
                namespace=change.namespace,
                path=change.path,
                version=change.version,
                stable_version=its_stable.version if its_stable is not None else None,
                change=rollout_change(
                    change.value,
                    its_stable,
                    rollback_to=change.version if change.existing is not None else None,
                ),
                value=change.value,
                stable_value=its_stable.value if its_stable is not None else None,
                version_exists=change.existing is not None
                or lookup.get_version(change.namespace, change.path, change.version) is not None,
            )
        )
    return RolloutPreview(
        request=request,
        version=version,
        version_exists=lookup.get_version(namespace, path, version) is not None,
        value=validated.value,
        stable=stable,
        lock=lock,
        change=rollout_change(validated.value, stable, rollback_to=rollback_to),
        changes=tuple(changes),
    )
