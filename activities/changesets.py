"""The store writes of a changeset: every config of it in ONE store transaction per step.

A changeset's run holds the lock of each of its configs (taken all or none), so the store knows
its configs: those whose lock (or rollout row) the run holds. The activities in rollout.py call
these helpers with the config they were given; for a single-config rollout they write exactly
what they wrote before (the same rows, the same event keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tempoconf.resolution import PublishedStage, VersionRecord
from tempoconf.rollout.changesets import change_event_key
from tempoconf.rollout.validation import ValidatedRollout
from tempoconf.store.records import StageLease
from tempoconf.store.store import Store

__all__ = [
    "RunConfig",
    "begin_changeset",
    "lock_changeset",
    "promote_run",
    "publish_run",
    "renew_run",
    "revert_run",
    "run_configs",
]


@dataclass(frozen=True)
class RunConfig:
    """One config a run changes, and the version it moves that config to (None: unknown)."""

    namespace: str
    path: str
    version: str | None


def run_configs(store: Store, namespace: str, path: str, run_id: str) -> list[RunConfig]:
    """The configs of a run: the one it was started for first, then every other config whose
    lock the run holds (a changeset's), by namespace and path."""
    first = RunConfig(namespace, path, None)
    others: list[RunConfig] = []
    for lock in store.locks_of_run(run_id):
        if (lock.namespace, lock.path) == (namespace, path):
            first = RunConfig(namespace, path, lock.version)
        else:
            others.append(RunConfig(lock.namespace, lock.path, lock.version))
    return [first, *sorted(others, key=lambda c: (c.namespace, c.path))]


def _each(
    store: Store,
    configs: list[RunConfig],
    base_key: str,
    write: Callable[[RunConfig, str], bool],
) -> bool:
    """`write(config, event_key)` for every config in one transaction; True if any wrote."""
    changeset = len(configs) > 1
    wrote = False
    with store.atomically():
        for config in configs:
            key = change_event_key(base_key, config.namespace, config.path, changeset=changeset)
            wrote = write(config, key) or wrote
    return wrote


def lock_changeset(
    store: Store,
    validated: ValidatedRollout,
    *,
    workflow_id: str,
    run_id: str,
    replace: dict[tuple[str, str], str],
) -> None:
    """Take the lock of every config in one transaction, or none: raises LockHeldError naming
    the first config whose lock another run holds (`replace`: config → the run id of a holder
    known to have ended, whose lock is taken over)."""
    with store.atomically():
        for change in validated.configs():
            store.acquire_lock(
                change.namespace,
                change.path,
                workflow_id=workflow_id,
                run_id=run_id,
                version=change.version,
                replace_run_id=replace.get((change.namespace, change.path)),
            )


def begin_changeset(
    store: Store,
    validated: ValidatedRollout,
    *,
    workflow_id: str,
    run_id: str,
    actor: str,
    details: dict[str, Any],
) -> None:
    """Store each new version and begin each config's rollout, in one transaction; each config's
    audit trail starts with `rollout.started` naming the changeset's configs."""
    request = validated.request
    configs = validated.configs()
    names = [f"{change.namespace}/{change.path}" for change in configs]
    with store.atomically():
        for change in configs:
            if change.existing is None:
                store.put_version(
                    change.namespace,
                    change.path,
                    VersionRecord(
                        version=change.version,
                        value=change.value,
                        author=request.author,
                        commit=request.commit,
                        message=request.message,
                        created_at=datetime.now(UTC),
                    ),
                )
            reason = request.message or (
                f"changeset: rollback to {change.version}"
                if change.existing is not None
                else f"changeset: rollout of {change.version} started"
            )
            store.begin_rollout(
                change.namespace,
                change.path,
                workflow_id=workflow_id,
                run_id=run_id,
                version=change.version,
                actor=actor,
                reason=reason,
                event_key=change_event_key(
                    f"{run_id}:begin", change.namespace, change.path, changeset=True
                ),
                details={**details, "changeset": names},
            )


def publish_run(
    store: Store,
    configs: list[RunConfig],
    *,
    run_id: str,
    stage: PublishedStage,
    actor: str,
    event_key: str,
) -> bool:
    """Publish `stage` for every config of the run in one transaction (LockHeldError if the run
    lost any config's lock: nothing is written)."""

    def write(config: RunConfig, key: str) -> bool:
        return store.publish_stage(
            config.namespace, config.path, run_id=run_id, stage=stage, actor=actor, event_key=key
        )

    return _each(store, configs, event_key, write)


def renew_run(
    store: Store, configs: list[RunConfig], *, run_id: str, leases: list[StageLease]
) -> int:
    """Renew the run's leases for every config in one transaction; rows updated."""
    count = 0
    with store.atomically():
        for config in configs:
            count += store.renew_leases(config.namespace, config.path, run_id=run_id, leases=leases)
    return count


def promote_run(
    store: Store,
    configs: list[RunConfig],
    *,
    run_id: str,
    workflow_id: str,
    version: str,
    actor: str,
    reason: str,
    event_key: str,
) -> bool:
    """Every config's version becomes stable in one transaction: the first config's is
    `version` (the plan's), each other's the one its lock was taken for."""

    def write(config: RunConfig, key: str) -> bool:
        return store.promote(
            config.namespace,
            config.path,
            run_id=run_id,
            workflow_id=workflow_id,
            version=version if config is configs[0] else (config.version or version),
            actor=actor,
            reason=reason,
            event_key=key,
        )

    return _each(store, configs, event_key, write)


def revert_run(
    store: Store,
    configs: list[RunConfig],
    *,
    run_id: str,
    workflow_id: str,
    actor: str,
    reason: str,
    outcome: str,
    event_key: str,
    audit_always: bool,
) -> bool:
    """Clear the run's stages and locks of every config in one transaction."""

    def write(config: RunConfig, key: str) -> bool:
        return store.revert(
            config.namespace,
            config.path,
            run_id=run_id,
            workflow_id=workflow_id,
            actor=actor,
            reason=reason,
            outcome=outcome,
            event_key=key,
            audit_always=audit_always,
        )

    return _each(store, configs, event_key, write)
