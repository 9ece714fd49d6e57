"""The gate on applied versions (tempoconf.gates.applied_gate): after a stage's cooldown, the rollout holds
until the stage's `min_applied` share of its cohort reports the version applied."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._audit import note, refresh_view, transition
from tempoconf.workflows.rollout._run import SYSTEM_ACTOR, RolloutRun, StopRollout
from tempoconf.workflows.rollout._waiting import wait_until

with workflow.unsafe.imports_passed_through():
    from tempoconf.gates.applied_gate import APPLY_RECHECK_SECONDS, AppliedGate, describe_gate
    from tempoconf.rollout.activity_io import CheckAppliedInput
    from tempoconf.rollout.health_verdicts import cohort_stages
    from tempoconf.rollout.plan import PlannedStage, RolloutPlan
    from tempoconf.rollout.progress import Outcome, RolloutState
    from tempoconf.rollout.run_state import APPLY_GATE_STATES

__all__ = ["await_applied"]


async def await_applied(
    run: RolloutRun, plan: RolloutPlan, stage: PlannedStage, *, resumed: bool
) -> None:
    """After the cooldown, hold until the stage's `min_applied` share of its cohort reports the
    version applied, checking through an activity and rechecking on a durable timer. Past
    `apply_timeout` (from the stage's publish) it reverts, or with `on_apply_timeout: hold` waits
    in `apply_timed_out` for an operator. `advance` passes the gate as it is, `bypass` promotes,
    `halt` reverts."""
    state, progress = run.state, run.progress
    deadline: datetime | None = None
    if stage.apply_timeout_seconds is not None and progress.stage_started_at is not None:
        deadline = datetime.fromisoformat(progress.stage_started_at) + timedelta(
            seconds=stage.apply_timeout_seconds
        )
    if not (resumed and RolloutState(progress.state) in APPLY_GATE_STATES):
        state.start_apply_gate()
        transition(
            run,
            RolloutState.WAITING_FOR_APPLY,
            SYSTEM_ACTOR,
            f"cooldown of {stage.name} passed; waiting for {(stage.min_applied or 1) * 100:g}% "
            f"of its cohort to apply {plan.version}",
        )

    def passed() -> bool:
        return state.advance_requested or state.bypass is not None

    while progress.state != RolloutState.APPLY_TIMED_OUT:
        gate = await _check_applied(run, plan, stage, deadline)
        if passed():
            return
        if gate.met:
            note(run, SYSTEM_ACTOR, f"apply gate of {stage.name} met: {describe_gate(gate)}")
            return
        now = run.clock()
        if deadline is not None and now >= deadline:
            reason = (
                f"apply timeout of stage {stage.name} "
                f"({stage.apply_timeout_seconds or 0:g}s) passed: {describe_gate(gate)}"
            )
            if stage.on_apply_timeout != "hold":
                raise StopRollout(Outcome.REVERTED, reason, SYSTEM_ACTOR)
            gate.timed_out = True
            transition(run, RolloutState.APPLY_TIMED_OUT, SYSTEM_ACTOR, reason + "; held")
            break
        wake = now + timedelta(seconds=APPLY_RECHECK_SECONDS)
        await wait_until(
            run,
            passed,
            deadline=wake if deadline is None else min(wake, deadline),
            summary=f"re-check which share of {stage.name}'s cohort applied {plan.version}",
        )
        if passed():
            return
    # Held past the timeout: only an operator moves it on (advance, bypass) or back (halt).
    await wait_until(run, passed)


async def _check_applied(
    run: RolloutRun, plan: RolloutPlan, stage: PlannedStage, deadline: datetime | None
) -> AppliedGate:
    gate = await _activities.check_applied(
        CheckAppliedInput(
            namespace=plan.namespace,
            path=plan.path,
            version=plan.version,
            stage=stage,
            cohort=cohort_stages(plan, stage),
            configs=_activities.gated_configs(plan),
            bucket_key=plan.bucket_key,
        ),
        summary=f"which share of {stage.name}'s cohort applied {plan.version}",
    )
    gate.deadline = deadline.isoformat() if deadline is not None else None
    run.progress.applied = gate
    refresh_view(run)
    run.raise_if_halted()
    return gate
