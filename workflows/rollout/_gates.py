"""The change gates before each stage's publish and before the promote: change windows (a durable
timer to the next opening) and namespace freezes (an activity asks the store)."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._audit import note, refresh_view, transition
from tempoconf.workflows.rollout._patches import CHANGE_GATES
from tempoconf.workflows.rollout._run import SYSTEM_ACTOR, RolloutRun
from tempoconf.workflows.rollout._waiting import wait_until

with workflow.unsafe.imports_passed_through():
    from tempoconf.gates.windows import next_opening
    from tempoconf.rollout.activity_io import CheckFreezeInput
    from tempoconf.rollout.details import time_left
    from tempoconf.rollout.plan import PlannedStage, RolloutPlan
    from tempoconf.rollout.progress import RolloutState

__all__ = ["pass_gates"]

# What a rollback passes a freeze with: the way back to a known version is never held.
ROLLBACK_PASSES_FREEZES = "a rollback to a version the config had: freezes never hold one"


async def pass_gates(run: RolloutRun, plan: RolloutPlan, stage: PlannedStage | None) -> None:
    """Before `stage` is published (None: before the promote), wait while outside every change
    window (a durable timer to the next opening, no polling) or while the namespace is frozen
    (the freeze activity is asked again at the freeze's `until`, every 30 s, a worker
    setting, and at once when told a freeze ended: `freeze_ended_signal`). Halt, revert and
    cancel end the wait at once (`wait_until`); leases are renewed meanwhile. A bypass skips the
    window (an operator's explicit decision), never a freeze: only `override_freeze` passes
    one. A rollout paused while it waited stays where it is until resume, then looks again."""
    if not workflow.patched(CHANGE_GATES):
        return  # runs started before gates existed: as they did
    state = run.state
    info = workflow.info()
    if stage is None:
        step, step_key = "promote", "promote"
    else:
        step = f"stage {stage.index + 1}/{len(plan.stages)} {stage.name}"
        step_key = f"stage:{stage.index}"
    waited = False
    while True:
        run.raise_if_halted()
        now = run.clock()
        opening = None if state.bypass is not None else next_opening(plan.windows, now)
        if opening is not None and opening.at > now:
            gate = f"the change window, opens {opening.label()}"
            reason = f"waiting for {gate} (in {time_left((opening.at - now).total_seconds())}) before {step}"
            _enter_gate(
                run, stage, RolloutState.WAITING_FOR_WINDOW, gate, opening.at.isoformat(), reason
            )
            waited = True
            await wait_until(
                run,
                lambda: run.state.bypass is not None,
                deadline=opening.at,
                summary=f"wait for the change window: opens {opening.label()}",
            )
            continue
        namespaces = ", ".join(dict.fromkeys(config[0] for config in plan.configs()))
        # Cleared before asking: a freeze that ends while the activity runs wakes the wait.
        run.freeze_ended = False
        freeze = await _activities.check_freeze(
            CheckFreezeInput(
                namespace=plan.namespace,
                path=plan.path,
                workflow_id=info.workflow_id,
                run_id=run.lock_run_id,
                version=plan.version,
                step=step,
                step_key=step_key,
                # A rollback is the way back to a known version: a freeze never holds it.
                override_reason=plan.override_freeze
                or (ROLLBACK_PASSES_FREEZES if plan.rollback else None),
                # Who gave the override: who started the rollout, as the API verified it.
                actor=plan.started_by or plan.author,
                configs=_activities.gated_configs(plan),
            ),
            summary=f"is namespace {namespaces} frozen? (before {step})",
        )
        if freeze.overridden:
            note(
                run,
                plan.started_by or plan.author or SYSTEM_ACTOR,
                f"passed a freeze ({plan.override_freeze or ROLLBACK_PASSES_FREEZES}): "
                f"{freeze.message}",
            )
        if freeze.frozen:
            recheck = run.clock() + timedelta(seconds=freeze.recheck_seconds)
            if freeze.until is not None:
                recheck = min(recheck, datetime.fromisoformat(freeze.until))
            _enter_gate(
                run,
                stage,
                RolloutState.FROZEN,
                freeze.message,
                freeze.until,
                f"{freeze.message}; waiting before {step}",
            )
            waited = True
            await wait_until(
                run,
                lambda: run.freeze_ended,
                deadline=recheck,
                summary=f"namespace {namespaces} frozen: look again",
            )
            continue
        if waited and state.progress.pause_reasons and state.bypass is None:
            await wait_until(
                run, lambda: not run.progress.pause_reasons or run.state.bypass is not None
            )
            continue
        break
    if waited:
        run.progress.gate = run.progress.gate_until = None
        refresh_view(run)


def _enter_gate(
    run: RolloutRun,
    stage: PlannedStage | None,
    to_state: RolloutState,
    gate: str,
    until: str | None,
    reason: str,
) -> None:
    """Show what the rollout waits for; a transition only when that changed (a freeze looked at
    again every 30 s adds nothing to the history while it holds)."""
    progress = run.progress
    if stage is not None and progress.stage_index != stage.index:
        # The wait belongs to the stage it holds back (a continue-as-new resumes it there).
        run.state.enter_stage(stage)
    if progress.state == to_state and progress.gate == gate:
        return
    progress.gate, progress.gate_until = gate, until
    transition(run, to_state, SYSTEM_ACTOR, reason)
