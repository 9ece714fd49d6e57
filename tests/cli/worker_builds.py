"""Build B of the worker-deploy tests: `ConfigRollout` with a new step, under the same type name.

The new step (an activity before each stage's publish) stands for any change of what the
workflow does. `ConfigRolloutWithNewStep` guards it with `workflow.patched`, as
docs/how-to/upgrades.md asks of every such change; `ConfigRolloutWithUnguardedStep` does not,
and breaks a rollout started on the build before it (the tests show both). Its own module: the
workflow sandbox imports it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.plan import PlannedStage, RolloutPlan
    from tempoconf.temporal.names import WORKFLOW_TYPE
    from tempoconf.workflows.rollout import ConfigRollout

NEW_STEP_PATCH = "deploys-test-new-step"
NEW_STEP_ACTIVITY = "deploys_test_new_step"


@activity.defn(name=NEW_STEP_ACTIVITY)
async def new_step(stage: str) -> str:
    return f"build B's new step before publishing {stage}"


async def _run_new_step(stage: PlannedStage) -> None:
    await workflow.execute_activity(
        NEW_STEP_ACTIVITY,
        stage.name,
        start_to_close_timeout=timedelta(seconds=10),
        summary=f"build B's new step before publishing {stage.name}",
    )


@workflow.defn(name=WORKFLOW_TYPE)
class ConfigRolloutWithNewStep(ConfigRollout):
    """Build B done right: the new step only where the history was not written without it."""

    @workflow.run
    async def run(self, *inputs: Any) -> Any:
        return await super().run(*inputs)

    async def _publish(self, plan: RolloutPlan, stage: PlannedStage) -> None:
        if workflow.patched(NEW_STEP_PATCH):
            await _run_new_step(stage)
        await super()._publish(plan, stage)


@workflow.defn(name=WORKFLOW_TYPE)
class ConfigRolloutWithUnguardedStep(ConfigRollout):
    """Build B done wrong: the new step always, so replaying an older history diverges."""

    @workflow.run
    async def run(self, *inputs: Any) -> Any:
        return await super().run(*inputs)

    async def _publish(self, plan: RolloutPlan, stage: PlannedStage) -> None:
        await _run_new_step(stage)
        await super()._publish(plan, stage)
