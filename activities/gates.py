"""The freeze gate: before a rollout widens or promotes, is its namespace (a changeset: any of
its namespaces) frozen?

The workflow asks this activity (it never reads the store itself) before each stage's publish and
before the promote. A rollout whose request carries `override_freeze` passes the freeze, and each
freeze it passes is written to the config's audit log (`rollout.freeze_overridden`: the request's
author, the override's reason, the freeze it passed), once per step however often it is retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import activity

from tempoconf.activities.run_events import record_run_event
from tempoconf.gates.freezes import FREEZE_RECHECK_SECONDS, Freeze, describe_freeze
from tempoconf.rollout.activity_io import (
    CHECK_FREEZE_ACTIVITY,
    CheckFreezeInput,
    CheckFreezeResult,
    GatedConfig,
)
from tempoconf.store.store import Store

__all__ = ["FREEZE_OVERRIDDEN_ACTION", "GateActivities"]

FREEZE_OVERRIDDEN_ACTION = "rollout.freeze_overridden"
UNKNOWN_AUTHOR = "unknown"


class GateActivities:
    """Activities bound to one store; register `activities()` with the worker. A frozen rollout
    looks again after `recheck_seconds` (sooner at the freeze's `until`)."""

    def __init__(self, store: Store, *, recheck_seconds: float = FREEZE_RECHECK_SECONDS) -> None:
        self._store = store
        self._recheck_seconds = recheck_seconds

    def activities(self) -> list[Callable[..., Any]]:
        return [self.check_freeze]

    @activity.defn(name=CHECK_FREEZE_ACTIVITY)
    async def check_freeze(self, input: CheckFreezeInput) -> CheckFreezeResult:
        changeset = bool(input.configs)
        configs = input.configs or [GatedConfig(input.namespace, input.path, input.version or "")]
        # A changeset waits while any of its namespaces is frozen: it widens all or none.
        freezes: dict[str, Freeze] = {}
        for namespace in dict.fromkeys(config.namespace for config in configs):
            freeze = await asyncio.to_thread(self._store.active_freeze, namespace)
            if freeze is not None:
                freezes[namespace] = freeze
        if not freezes:
            return CheckFreezeResult(frozen=False)
        message = "; ".join(describe_freeze(freeze) for freeze in freezes.values())
        untils = [freeze.until for freeze in freezes.values() if freeze.until is not None]
        # Looked at again at the first `until` at the latest: the others may still hold it then.
        until = min(untils).isoformat() if untils else None
        if input.override_reason is None:
            return CheckFreezeResult(
                frozen=True, message=message, until=until, recheck_seconds=self._recheck_seconds
            )
        for config in configs:
            passed = freezes.get(config.namespace)
            if passed is None:
                continue
            await asyncio.to_thread(
                record_run_event,
                self._store,
                config,
                changeset=changeset,
                # One row per freeze passed at each step, however often the activity is retried.
                key=f"{input.run_id}:freeze-override:{input.step_key}:{passed.id}",
                action=FREEZE_OVERRIDDEN_ACTION,
                actor=input.actor or UNKNOWN_AUTHOR,
                reason=input.override_reason,
                version=input.version,
                workflow_id=input.workflow_id,
                details={"freeze": passed.to_json(), "step": input.step},
            )
        return CheckFreezeResult(frozen=False, message=message, until=until, overridden=True)
