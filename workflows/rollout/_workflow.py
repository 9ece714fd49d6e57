"""`ConfigRollout`: the run loop and the handlers. Each step of a stage is its own module (gates,
publish and hold, the applied gate, end-of-hold checks, approval, promote and revert), acting
on the `RolloutRun` the workflow holds."""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._applied_gate import await_applied
from tempoconf.workflows.rollout._approval import await_approval
from tempoconf.workflows.rollout._audit import refresh_view, transition, upsert_search_attributes
from tempoconf.workflows.rollout._checks import check_health
from tempoconf.workflows.rollout._commands import with_command_handlers
from tempoconf.workflows.rollout._ending import (
    end,
    end_failed_prepare,
    keep_result,
    promote,
    revert,
)
from tempoconf.workflows.rollout._gates import pass_gates
from tempoconf.workflows.rollout._hold import hold, publish
from tempoconf.workflows.rollout._inputs import input_problem, workflow_id_problem
from tempoconf.workflows.rollout._patches import (
    APPROVALS_BOUND,
    CHANGESET_PLAN_DIGEST,
    FOUR_EYES_IDENTITIES,
    PREPARE_FAILURE_AUDITED,
    SEARCH_ATTRIBUTE_PATHS,
)
from tempoconf.workflows.rollout._run import (
    GOES_ON,
    SYSTEM_ACTOR,
    ContinueAsNew,
    RolloutRun,
    StopRollout,
)
from tempoconf.workflows.rollout._waiting import continue_as_new_if_due, wait_until

with workflow.unsafe.imports_passed_through():
    from tempoconf.problems import InvalidRequestError, Problem
    from tempoconf.rollout.activity_io import (
        INVALID_REQUEST_ERROR,
        ROLLOUT_RUNNING_ERROR,
        PrepareInput,
    )
    from tempoconf.rollout.plan import PlannedStage, RolloutPlan
    from tempoconf.rollout.progress import (
        Outcome,
        RolloutProgress,
        RolloutResult,
        RolloutState,
        StageStatus,
    )
    from tempoconf.rollout.run_state import RolloutRunState, StageStep
    from tempoconf.rollout.spans import rollout_step
    from tempoconf.temporal.names import FREEZE_ENDED_SIGNAL, WORKFLOW_TYPE

__all__ = ["ConfigRollout"]


def _stage_attributes(plan: RolloutPlan, stage: PlannedStage) -> dict[str, str | int | float]:
    """What a step's span says of its stage (tempoconf.rollout.spans)."""
    return {
        "stage": stage.name,
        "stage_number": stage.index + 1,
        "stage_count": len(plan.stages),
        "cooldown_seconds": stage.cooldown_seconds,
    }


@workflow.defn(name=WORKFLOW_TYPE)
@with_command_handlers  # halt, bypass, advance, pause, resume, approve: tempoconf.rollout.commands
class ConfigRollout:
    # `*inputs`, not (request, carried): the SDK decodes a start's inputs and calls __init__ with
    # them before any of this code runs, so a start with none or with two would fail every
    # workflow task forever (a missing argument, a second input that is no RolloutRunState)
    # instead of failing the workflow with a message. Decoded as plain JSON here; the carried
    # state is converted below, exactly as the default converter did from the type hint.
    @workflow.init
    def __init__(self, *inputs: Any) -> None:
        info = workflow.info()
        self._input_problem = workflow_id_problem(info.workflow_id) or input_problem(
            len(inputs), continued=info.continued_run_id is not None
        )
        self._request: Any = inputs[0] if inputs and self._input_problem is None else None
        carried: RolloutRunState | None = None
        if len(inputs) == 2 and self._input_problem is None:
            converter = workflow.payload_converter()
            carried = converter.from_payload(converter.to_payload(inputs[1]), RolloutRunState)
        self._resumed = carried is not None
        # What every step and command acts on (tempoconf.workflows.rollout._run).
        self.rollout = RolloutRun(
            carried or RolloutRunState.start(self._request, workflow_id=info.workflow_id)
        )

    # -- main loop -----------------------------------------------------------------------------
    @workflow.run
    async def run(self, *inputs: Any) -> RolloutResult:
        """`inputs`: the request as the user gave it; after a continue-as-new, also the state of
        the run this one continues."""
        if self._input_problem is not None:
            self._refuse_input(self._input_problem)
        request = self._request
        try:
            return await self._run(request, resumed=self._resumed)
        except ContinueAsNew:
            pass
        workflow.continue_as_new(args=[request, self.rollout.state])

    def _refuse_input(self, problem: str) -> NoReturn:
        """Fail the workflow at once, as a refused request: nothing was published or locked."""
        message = str(InvalidRequestError([Problem("", problem)]))
        self.rollout.progress.reason = message
        transition(self.rollout, RolloutState.FAILED, SYSTEM_ACTOR, message)
        raise ApplicationError(
            message,
            [{"pointer": "", "message": problem}],
            type=INVALID_REQUEST_ERROR,
            non_retryable=True,
        )

    async def _run(self, request: Any, *, resumed: bool) -> RolloutResult:
        run = self.rollout
        upsert_search_attributes(run)
        try:
            if resumed and run.state.plan is not None:
                plan = run.state.plan
                refresh_view(run)
            else:
                with rollout_step("prepare"):
                    plan = await self._prepare(request)
                run.state.set_plan(
                    plan,
                    change_texts_in_digest=bool(plan.changes)
                    and not workflow.patched(CHANGESET_PLAN_DIGEST),
                )
                if plan.paths_attribute and workflow.patched(SEARCH_ATTRIBUTE_PATHS):
                    run.state.pending_paths = plan.paths()
                self._approval_forms()
                upsert_search_attributes(run)
            bypassed = await self._run_stages(plan)
            await pass_gates(run, plan, None)
            with rollout_step("promote", {"version": plan.version}):
                return await promote(run, plan, bypassed=bypassed)
        except StopRollout as stop:
            return end(await revert(run, stop.outcome, stop.reason, stop.by), stop.by)
        except ActivityError as error:
            if isinstance(error.cause, CancelledError):
                keep_result(
                    await revert(run, Outcome.CANCELLED, "the workflow was cancelled", "temporal")
                )
                raise
            # A step failed past its retries (e.g. the lock was taken over): never leave it half-done.
            reverted = await revert(run, Outcome.REVERTED, f"{error.cause or error}", SYSTEM_ACTOR)
            return end(reverted, SYSTEM_ACTOR)
        except asyncio.CancelledError:
            # Cancellation (e.g. from the Web UI): put every client back on stable, then end as cancelled.
            keep_result(
                await revert(run, Outcome.CANCELLED, "the workflow was cancelled", "temporal")
            )
            raise

    async def _prepare(self, request: Any) -> RolloutPlan:
        run = self.rollout
        info = workflow.info()
        try:
            plan = await _activities.prepare(
                PrepareInput(request=request, workflow_id=info.workflow_id, run_id=run.lock_run_id),
                summary="validate the request and the value, store the version, take the config's lock",
            )
        except ActivityError as error:
            cause = error.cause
            if isinstance(cause, CancelledError):
                raise  # the workflow is being cancelled: run() reverts and ends it as cancelled
            refused = isinstance(cause, ApplicationError) and cause.type in (
                INVALID_REQUEST_ERROR,
                ROLLOUT_RUNNING_ERROR,
            )
            audited = False
            if not refused:
                # Prepare may have taken the lock before failing: release it before failing.
                reason = f"prepare failed: {cause or error}"
                if workflow.patched(PREPARE_FAILURE_AUDITED):
                    await end_failed_prepare(run, reason)
                    audited = True
                else:  # runs that failed their prepare before this worker: as they did
                    await revert(run, Outcome.REVERTED, reason, SYSTEM_ACTOR)
            message = cause.message if isinstance(cause, ApplicationError) else str(error)
            run.progress.reason = message
            # A refused request wrote nothing (and a refusal for a running rollout must not write
            # into that one's trail); a failed prepare's `rollout.failed` is in the log already.
            transition(run, RolloutState.FAILED, SYSTEM_ACTOR, message, audit=not audited)
            raise ApplicationError(
                message,
                *(cause.details if isinstance(cause, ApplicationError) else ()),
                type=cause.type if isinstance(cause, ApplicationError) else "PrepareFailed",
                non_retryable=True,
            ) from None
        return plan

    async def _run_stages(self, plan: RolloutPlan) -> bool:
        """Walk the stages (a continued run from where the last one was); True when a bypass cut
        the walk short."""
        run = self.rollout
        run.raise_if_halted()
        state = run.state
        for stage in plan.stages:
            if stage.index < state.progress.stage_index:
                continue  # an earlier run passed it
            # The step of the stage an earlier run was in when it continued as new; None: all.
            resume = state.step if stage.index == state.progress.stage_index else None

            def runs(step: StageStep, resume: StageStep | None = resume) -> bool:
                order = list(StageStep)
                return resume is None or order.index(step) >= order.index(resume)

            if state.bypass:
                return True
            if resume is None:
                # Between two stages nothing is in flight: a good place to cut the history.
                await continue_as_new_if_due(run)
            if runs(StageStep.PUBLISH):
                state.step = StageStep.PUBLISH
                await pass_gates(run, plan, stage)
                with rollout_step("publish", _stage_attributes(plan, stage), ends_ok=GOES_ON):
                    await self._publish(plan, stage)
            run.raise_if_halted()
            if runs(StageStep.HOLD):
                resumed_hold = resume == StageStep.HOLD
                state.step = StageStep.HOLD
                with rollout_step("hold", _stage_attributes(plan, stage), ends_ok=GOES_ON):
                    await hold(run, plan, stage, resumed=resumed_hold)
            if stage.min_applied is not None and state.bypass is None and runs(StageStep.APPLY):
                resumed_gate = resume == StageStep.APPLY
                state.step = StageStep.APPLY
                await await_applied(run, plan, stage, resumed=resumed_gate)
            if state.bypass:
                return True
            if runs(StageStep.CHECK):
                resumed_check = resume == StageStep.CHECK
                state.step = StageStep.CHECK
                with rollout_step("check", _stage_attributes(plan, stage), ends_ok=GOES_ON):
                    await check_health(run, plan, stage, resumed=resumed_check)
            if stage.manual and state.bypass is None and runs(StageStep.APPROVAL):
                resumed_approval = resume == StageStep.APPROVAL
                state.step = StageStep.APPROVAL
                await await_approval(run, stage, resumed=resumed_approval)
            if state.bypass:
                return True
            state.step = StageStep.SETTLE
            await wait_until(
                run, lambda: not run.progress.pause_reasons or run.state.bypass is not None
            )
            state.mark_stage(stage.index, StageStatus.PASSED)
        return state.bypass is not None

    def _approval_forms(self) -> None:
        """How this rollout takes approvals, decided once, after prepare: the runs
        continue-as-new starts carry it, so a run started before keeps the forms it was started
        with. A method: a build of the worker from before them (tests/workflows/worker_builds.py)
        overrides it."""
        state = self.rollout.state
        if workflow.patched(APPROVALS_BOUND):
            state.bind_approvals(self.rollout.lock_run_id)
        state.four_eyes_normalised = workflow.patched(FOUR_EYES_IDENTITIES)

    async def _publish(self, plan: RolloutPlan, stage: PlannedStage) -> None:
        """A stage's publish (_hold.publish). A method: a build of the worker with a step before
        it (tests/cli/worker_builds.py) overrides it."""
        await publish(self.rollout, plan, stage)

    # -- handlers: the operator commands' are made by with_command_handlers -------------------
    @workflow.signal(name=FREEZE_ENDED_SIGNAL)
    def freeze_ended_signal(self, namespace: str | None = None) -> None:
        """A freeze ended (`namespace`'s; tempoconf.temporal.freeze_wakeup): a rollout waiting on one
        looks again now, not at its next look. Not an operator command: it changes nothing
        by itself, so it is neither refused nor audited; the look that follows is."""
        self.rollout.freeze_ended = True

    @workflow.query(name="status")
    def status(self) -> RolloutProgress:
        return self.rollout.progress
