"""The gate on applied versions: which share of a stage's cohort applied the rollout's version
(tempoconf.gates.applied_gate). Reads the store only; the workflow rechecks on a durable timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import activity

from tempoconf.gates.applied_gate import AppliedGate, judge_applied
from tempoconf.rollout.activity_io import CHECK_APPLIED_ACTIVITY, CheckAppliedInput, GatedConfig
from tempoconf.store.store import Store

__all__ = ["AppliedGateActivities"]


class AppliedGateActivities:
    """The activity of a stage's `min_applied` gate, over one store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def activities(self) -> list[Callable[..., Any]]:
        return [self.check_stage_applied]

    @activity.defn(name=CHECK_APPLIED_ACTIVITY)
    async def check_stage_applied(self, input: CheckAppliedInput) -> AppliedGate:
        """Judge the gate now: the cohort's clients seen in the stage's `applied_window`, and
        which of them last reported the rollout's version applied."""
        return await asyncio.to_thread(self._judge, input)

    def _judge(self, input: CheckAppliedInput) -> AppliedGate:
        configs = input.configs or [GatedConfig(input.namespace, input.path, input.version)]
        gates = [self._judge_config(input, config) for config in configs]
        # A changeset's gate is its least-applied config's, met only once every config's is: a
        # client that applied one value of the changeset and not the other is a straggler.
        worst = min(gates, key=lambda gate: (gate.met, gate.ratio or 0.0))
        worst.met = all(gate.met for gate in gates)
        return worst

    def _judge_config(self, input: CheckAppliedInput, config: GatedConfig) -> AppliedGate:
        store, stage = self._store, input.stage
        now = store.now()
        since = now - timedelta(seconds=stage.applied_window_seconds)
        seen = store.recent_clients(config.namespace, config.path, since=since)
        applied = store.applied_states(config.namespace, config.path)
        return judge_applied(
            path=input.bucket_key or config.path,
            stages=input.cohort or [stage],
            version=config.version,
            stage_name=stage.name,
            min_applied=stage.min_applied or 1.0,
            window_seconds=stage.applied_window_seconds,
            seen=seen,
            applied=applied,
            now=now,
        )
