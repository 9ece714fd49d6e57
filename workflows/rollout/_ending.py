"""How a rollout ends: the promote (the version becomes stable), the revert (the compensation:
every client back on stable), the release after a failed prepare, and the workflow's own ending
(a reverted or halted rollout fails, a cancelled one keeps its result in the memo)."""

from __future__ import annotations

import asyncio

from temporalio import workflow

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._audit import audit_transitions, note, transition
from tempoconf.workflows.rollout._notify import finish_notifications, notify
from tempoconf.workflows.rollout._patches import OUTCOME_STATUSES
from tempoconf.workflows.rollout._run import (
    SYSTEM_ACTOR,
    RolloutRun,
    finish_despite_cancellation,
)

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.activity_io import PromoteInput, RevertInput
    from tempoconf.rollout.outcomes import (
        COMPLETED_OUTCOMES,
        RESULT_MEMO,
        ending_error,
        result_json,
    )
    from tempoconf.rollout.plan import RolloutPlan
    from tempoconf.rollout.progress import Outcome, RolloutResult, RolloutState
    from tempoconf.rollout.spans import rollout_step

__all__ = ["end", "end_failed_prepare", "keep_result", "promote", "revert"]


def end(result: RolloutResult, by: str) -> RolloutResult:
    """A reverted or halted rollout fails (tempoconf.rollout.outcomes), its result in the failure's
    details; runs that ended before the patch completed with every outcome, and replay so."""
    if result.outcome in COMPLETED_OUTCOMES or not workflow.patched(OUTCOME_STATUSES):
        return result
    raise ending_error(result, by=by) from None  # its reason says why; no internal cause


def keep_result(result: RolloutResult) -> None:
    """A cancelled run ends Canceled, and a cancellation carries no result: keep it in the
    memo (tempoconf.rollout.outcomes) before the workflow ends."""
    if workflow.patched(OUTCOME_STATUSES):
        workflow.upsert_memo({RESULT_MEMO: result_json(result)})


async def promote(run: RolloutRun, plan: RolloutPlan, *, bypassed: bool) -> RolloutResult:
    info = workflow.info()
    by, reason = run.state.promotion(system_actor=SYSTEM_ACTOR)
    transition(run, RolloutState.PROMOTING, by, reason)
    await audit_transitions(run)
    promotion = asyncio.ensure_future(
        _activities.promote(
            PromoteInput(
                plan=plan,
                workflow_id=info.workflow_id,
                run_id=run.lock_run_id,
                actor=by,
                reason=reason,
            ),
            summary=f"promote {plan.version} to stable",
        )
    )
    if await finish_despite_cancellation(promotion):
        # Too late to cancel: the version is (being made) stable. Say so, and end promoted.
        note(
            run,
            "temporal",
            "cancellation requested while promoting: ignored, the promotion completed",
        )
    outcome = Outcome.BYPASSED if bypassed else Outcome.PROMOTED
    _finish(run, outcome, by, reason, stable_version=plan.version)
    await _let_in_flight_finish(run)
    return RolloutResult(
        outcome=outcome, version=plan.version, reason=reason, stable_version=plan.version
    )


async def end_failed_prepare(run: RolloutRun, reason: str) -> None:
    """Release what a failed prepare may have taken (the lock, the rollout row) and end the
    audit trail with `rollout.failed`, in one store transaction: also when it took nothing,
    since it may have written `rollout.started` (and `rollout.reverting` is written here)."""
    run.progress.reason = reason
    transition(run, RolloutState.REVERTING, SYSTEM_ACTOR, reason)
    await audit_transitions(run)
    release = asyncio.ensure_future(
        _activities.revert(
            _revert_input(run, RolloutState.FAILED.value, SYSTEM_ACTOR, reason, audit_always=True),
            summary=f"release what the failed prepare took ({reason})",
        )
    )
    if await finish_despite_cancellation(release):
        raise asyncio.CancelledError()


async def revert(run: RolloutRun, outcome: Outcome, reason: str, by: str) -> RolloutResult:
    """The compensation. A cancellation that arrives meanwhile waits for it to finish (every
    client back on stable first), then ends the workflow as cancelled."""
    with rollout_step("revert", {"outcome": outcome.value, "reason": reason}):
        reverting = asyncio.ensure_future(_revert_now(run, outcome, reason, by))
        if await finish_despite_cancellation(reverting):
            keep_result(reverting.result())
            raise asyncio.CancelledError()
        return reverting.result()


async def _revert_now(run: RolloutRun, outcome: Outcome, reason: str, by: str) -> RolloutResult:
    run.progress.reason = reason
    transition(run, RolloutState.REVERTING, by, reason)
    await audit_transitions(run)
    reverted = await _activities.revert(
        _revert_input(run, outcome.value, by, reason),
        summary=f"revert: clear the live stages, every client back on stable if any ({reason})",
    )
    # What clients are back on: the stable version, or none (the phase must not say "stable").
    _finish(run, outcome, by, reason, stable_version=reverted.stable_version)
    if outcome is not Outcome.CANCELLED:
        await _let_in_flight_finish(run)
    return RolloutResult(
        outcome=outcome,
        version=run.progress.version,
        reason=reason,
        stable_version=reverted.stable_version,
    )


def _revert_input(
    run: RolloutRun, outcome: str, by: str, reason: str, *, audit_always: bool = False
) -> RevertInput:
    info = workflow.info()
    return RevertInput(
        namespace=run.progress.namespace,
        path=run.progress.path,
        workflow_id=info.workflow_id,
        run_id=run.lock_run_id,
        outcome=outcome,
        actor=by,
        reason=reason,
        audit_always=audit_always,
    )


def _finish(
    run: RolloutRun, outcome: Outcome, by: str, reason: str, *, stable_version: str | None
) -> None:
    """The rollout's final state, shown and told to the webhooks (its audit row is the promote's
    or the revert's own)."""
    run.state.finish(outcome, reason, stable_version=stable_version)
    transition(run, RolloutState(outcome.value), by, reason, audit=False)
    notify(run, outcome.value, reason)


async def _let_in_flight_finish(run: RolloutRun) -> None:
    """Deliveries and operator commands in flight end before the workflow does."""
    await finish_notifications(run)
    await workflow.wait_condition(workflow.all_handlers_finished)
