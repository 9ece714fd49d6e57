"""The prepare step's store writes and its plan, for one config or a changeset's several: a
single config's rollout is a changeset of one (the same rows, reasons and event keys it always
had; a changeset's name their config and the changeset)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tempoconf.resolution import VersionRecord
from tempoconf.rollout.change import rollout_change
from tempoconf.rollout.changesets import change_event_key
from tempoconf.rollout.plan import RolloutPlan, plan_from_request
from tempoconf.rollout.validation import ValidatedRollout
from tempoconf.store.store import Store

__all__ = ["begin_run", "prepared_plan"]


def begin_run(
    store: Store,
    validated: ValidatedRollout,
    *,
    workflow_id: str,
    run_id: str,
    actor: str,
    details: dict[str, Any],
) -> None:
    """Store each new version and begin each config's rollout, in one transaction; each config's
    audit trail starts with `rollout.started` (a changeset's naming the changeset's configs)."""
    request = validated.request
    configs = validated.configs()
    changeset = bool(validated.changes)  # a changeset request, whatever its size
    names = [f"{change.namespace}/{change.path}" for change in configs]
    prefix = "changeset: " if changeset else ""
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
                f"{prefix}rollback to {change.version}"
                if change.existing is not None
                else f"{prefix}rollout of {change.version} started"
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
                    f"{run_id}:begin", change.namespace, change.path, changeset=changeset
                ),
                details={**details, "changeset": names} if changeset else details,
            )


def prepared_plan(validated: ValidatedRollout, stables: list[VersionRecord | None]) -> RolloutPlan:
    """The run's plan, with what each config changes told against its stable (`stables`, in the
    order of `validated.configs()`; for people: not in the digest)."""
    plan = plan_from_request(validated.request, validated.version)
    changes = [
        rollout_change(
            change.value,
            stable,
            rollback_to=change.version if change.existing is not None else None,
        )
        for change, stable in zip(validated.configs(), stables, strict=True)
    ]
    if not validated.changes:
        return replace(plan, change=changes[0])
    planned = [
        replace(planned, change=change)
        for planned, change in zip(plan.changes, changes, strict=True)
    ]
    return replace(
        plan,
        changes=planned,
        change=f"{len(planned)} configs: "
        + "; ".join(f"{c.namespace}/{c.path}: {c.change}" for c in planned),
    )
