"""A manual stage's approval: after its hold and checks, the rollout waits for `approve` (or a
bypass); the webhooks are told it waits."""

from __future__ import annotations

from temporalio import workflow

from tempoconf.workflows.rollout._audit import transition
from tempoconf.workflows.rollout._notify import notify
from tempoconf.workflows.rollout._run import SYSTEM_ACTOR, RolloutRun
from tempoconf.workflows.rollout._waiting import wait_until

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.plan import PlannedStage
    from tempoconf.rollout.progress import RolloutState

__all__ = ["await_approval"]


async def await_approval(run: RolloutRun, stage: PlannedStage, *, resumed: bool) -> None:
    if not resumed:
        run.progress.approved = False
        transition(
            run,
            RolloutState.AWAITING_APPROVAL,
            SYSTEM_ACTOR,
            f"stage {stage.name} passed; waiting for approve",
        )
        notify(run, "awaiting_approval", f"stage {stage.name} passed its hold and checks")
    await wait_until(run, lambda: run.progress.approved or run.state.bypass is not None)
