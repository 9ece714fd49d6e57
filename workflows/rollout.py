"""`ConfigRollout`: one staged configuration rollout as a durable state machine.

prepare → for each stage: publish → hold (durable timer, leases renewed; the interval checks run
beside it in one activity) → check health → [approval] → promote. Halt, an unhealthy check or
cancellation run the compensating revert. Deterministic code only: every side effect is an
activity, referred to by name.

A run's history stays bounded: a stage costs a fixed number of events whatever its hold's length
or its checks' interval, and what still grows (lease renewals over weeks, operator commands, many
stages) is cut by continue-as-new, which carries the whole `RolloutRunState` to the next run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from tempoconf.gates.applied_gate import APPLY_RECHECK_SECONDS, AppliedGate, describe_gate
    from tempoconf.gates.windows import next_opening
    from tempoconf.problems import InvalidRequestError, Problem
    from tempoconf.rollout.activity_io import (
        CHECK_APPLIED_ACTIVITY,
        CHECK_FREEZE_ACTIVITY,
        CHECK_HEALTH_ACTIVITY,
        INVALID_REQUEST_ERROR,
        NOTIFY_ACTIVITY,
        PREPARE_ACTIVITY,
        PROMOTE_ACTIVITY,
        PUBLISH_STAGE_ACTIVITY,
        RECORD_TRANSITION_ACTIVITY,
        RENEW_LEASES_ACTIVITY,
        REVERT_ACTIVITY,
        ROLLOUT_RUNNING_ERROR,
        WATCH_HEALTH_ACTIVITY,
        CheckAppliedInput,
        CheckFreezeInput,
        CheckFreezeResult,
        CheckHealthInput,
        GatedConfig,
        NotifyInput,
        PrepareInput,
        PromoteInput,
        PublishStageInput,
        PublishStageResult,
        RecordTransitionsInput,
        RenewLeasesInput,
        RenewLeasesResult,
        RevertInput,
        RevertResult,
        WatchHealthInput,
        WatchHealthResult,
    )
    from tempoconf.rollout.commands import COMMANDS, AnswerWhen, CommandName, OperatorCommand
    from tempoconf.rollout.details import render_current_details, time_left
    from tempoconf.rollout.health_verdicts import UNHEALTHY, cohort_stages
    from tempoconf.rollout.outcomes import (
        COMPLETED_OUTCOMES,
        RESULT_MEMO,
        ending_error,
        result_json,
    )
    from tempoconf.rollout.plan import PlannedStage, RolloutPlan
    from tempoconf.rollout.progress import (
        CheckResult,
        CommandResult,
        HealthReport,
        Outcome,
        RolloutProgress,
        RolloutResult,
        RolloutState,
        StageStatus,
    )
    from tempoconf.rollout.run_state import APPLY_GATE_STATES, Effect, RolloutRunState, StageStep
    from tempoconf.rollout.spans import rollout_step
    from tempoconf.storable import storable_text, text_problem
    from tempoconf.temporal.names import (
        FREEZE_ENDED_SIGNAL,
        PATH_ATTRIBUTE,
        PATHS_ATTRIBUTE,
        SEARCH_ATTRIBUTES,
        STAGE_ATTRIBUTE,
        STATE_ATTRIBUTE,
        VERSION_ATTRIBUTE,
        WORKFLOW_TYPE,
    )

__all__ = ["ConfigRollout"]

# Store writes are short; a store outage is retried with backoff rather than failing the rollout.
STORE_WRITE_TIMEOUT = timedelta(seconds=30)
# Store activities heartbeat every second while they run (activities.heartbeats): a worker lost in
# the middle of one is noticed within this and the activity retried on another worker, in seconds
# instead of at STORE_WRITE_TIMEOUT; a slow write on a live worker keeps heartbeating.
# Timeouts are not part of a replay's check: runs started before this replay as they were.
STORE_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# Retries of store work back off to this and no further: a rollout resumes within ~5 s of the
# store's return (at 30 s it took up to 27 s), at one attempt per 5 s per rollout while it is down.
STORE_RETRY_CAP = timedelta(seconds=5)
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=STORE_RETRY_CAP,
)
# Prepare gives up (and the workflow fails) after a bounded number of attempts: an operator is
# waiting on the CLI for it, and the lock it may hold is released by the revert that follows.
# 12 attempts at the 5 s cap keep its window for a store outage at ~45 s, as before the cap.
PREPARE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=STORE_RETRY_CAP,
    maximum_attempts=12,
    non_retryable_error_types=[INVALID_REQUEST_ERROR, ROLLOUT_RUNNING_ERROR],
)
# The revert is the emergency path: it retries until it succeeds (unlimited attempts).
REVERT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=STORE_RETRY_CAP,
)
# A check's own retries happen inside the activity; the activity is retried only for worker loss.
# Webhooks: a few tries, then given up; they never hold up or fail the rollout.
WEBHOOK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
WEBHOOK_TIMEOUT = timedelta(seconds=10)
HEALTH_CHECK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
# Health activities heartbeat every few seconds: a lost worker is noticed this soon, not at the
# start-to-close timeout (which for the hold's watch is the whole hold).
HEALTH_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# The hold's watch resumes from its heartbeat on retry, so it is retried for as long as the hold
# lasts (a worker deploy during a week-long hold is one more attempt, not a failure).
HEALTH_WATCH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=STORE_RETRY_CAP,
)
DEFAULT_RECHECK_SECONDS = 30.0
SYSTEM_ACTOR = "workflow"
_SEARCH_ATTRIBUTE_KEYS = {key.name: key for key in SEARCH_ATTRIBUTES}
# An update answers once the rollout has acted on it (e.g. the next stage is published and held),
# or after this long with a `requested:` message: clients wait 15 s for an answer.
STEERING_REPLY_TIMEOUT = timedelta(seconds=10)


async def _finish_despite_cancellation(step: asyncio.Future[Any]) -> bool:
    """Await `step` to its end even if the workflow is cancelled meanwhile (compensation and
    promotion must not stop halfway); True when a cancellation arrived."""
    cancelled = False
    while not step.done():
        try:
            await asyncio.shield(step)
        except asyncio.CancelledError:
            cancelled = True
    step.result()  # re-raise the step's own failure, if any
    return cancelled


def _health_check_timeout(stage: PlannedStage, indices: list[int]) -> timedelta:
    """Long enough for the slowest check's every attempt, and the activity's own start."""
    return timedelta(seconds=stage.seconds_per_check_run(indices) + 15.0)


def _stage_attributes(plan: RolloutPlan, stage: PlannedStage) -> dict[str, str | int | float]:
    """What a step's span says of its stage (tempoconf.rollout.spans)."""
    return {
        "stage": stage.name,
        "stage_number": stage.index + 1,
        "stage_count": len(plan.stages),
        "cooldown_seconds": stage.cooldown_seconds,
    }


def _ignore_outcome(task: asyncio.Task[Any]) -> None:
    """Retrieve an activity's outcome nobody awaits (a cancelled watch, a webhook delivery), so
    asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()


class _ContinueAsNew(Exception):
    """Internal: this run's history is long enough; go on as a new run with the same state."""


# What ends a step's span without failing it: the run goes on as a new one, which opens it again.
_GOES_ON = (_ContinueAsNew,)


class _StopRollout(Exception):
    """Internal: leave the stage loop and revert (halt or unhealthy)."""

    def __init__(self, outcome: Outcome, reason: str, by: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.by = by


# workflow.patched: a failed prepare ends its audit trail with `rollout.failed` (written with the
# release of what it took), instead of a revert that wrote nothing when it had taken nothing.
PREPARE_FAILURE_AUDITED = "prepare-failure-audited"

# workflow.patched: before each stage's publish and before the promote, the rollout waits while
# it is outside every change window (`windows`) or its namespace is frozen (tempoconf.gates.freezes).
CHANGE_GATES = "change-windows-and-freezes"
ROLLBACK_PASSES_FREEZES = "a rollback to a version the config had: freezes never hold one"

# workflow.patched (issue 25): a changeset's digest leaves out each config's change sentence, so
# it is the one `rollout plan` prints; a run from before keeps the digest it showed (and that
# its approvals named).
CHANGESET_PLAN_DIGEST = "changeset-plan-digest"
# workflow.patched (issue 25): the KeywordList `TempoconfPaths` (every config's path) is upserted
# after prepare, where the prepare step found it registered (RolloutPlan.paths_attribute).
SEARCH_ATTRIBUTE_PATHS = "search-attribute-paths"
# workflow.patched: a reverted or halted rollout fails (RolloutReverted, RolloutHalted) instead of
# completing, and a cancelled one keeps its result in the memo before it ends Canceled
# (tempoconf.rollout.outcomes). Promoted and bypassed rollouts complete as before.
OUTCOME_STATUSES = "outcomes-as-temporal-statuses"

# What a start with the wrong number of inputs is told (the Temporal CLI's `--input` is one input).
EXPECTED_INPUT = (
    "ConfigRollout takes exactly one input, the rollout request: a JSON object such as "
    '\'{"path": "myproject/server_config", "value": {"max_connections": 2000}, '
    '"stages": [{"channel": "canary"}]}\' (`temporal workflow start --type ConfigRollout '
    "--task-queue tempoconf --input '{...}'` or `--input-file examples/rollout.json`; "
    "`tempoconf schema request` prints its JSON Schema)"
)


def _input_problem(count: int, *, continued: bool) -> str | None:
    """Why `count` inputs are not a rollout's (None: they are). A second input is the state a
    run carries to the next by continue-as-new, and comes from nowhere else."""
    if count == 1 or (count == 2 and continued):
        return None
    if count == 0:
        return f"the workflow was started without an input. {EXPECTED_INPUT}"
    return f"the workflow was started with {count} inputs. {EXPECTED_INPUT}"


def _workflow_id_problem(workflow_id: str) -> str | None:
    """Why the store cannot keep this rollout's own workflow id (None: it can). The rollout writes
    it into its lock and audit rows; the API refuses such an id, a start with the Temporal CLI or
    an SDK is refused here, before anything is stored."""
    problem = text_problem(workflow_id)
    if problem is None:
        return None
    return (
        f"the workflow id {ascii(workflow_id)} {problem} (start the rollout under an id the "
        "store can keep: by default rollout:{namespace}/{path})"
    )


@workflow.defn(name=WORKFLOW_TYPE)
class ConfigRollout:
    # `*inputs`, not (request, carried): the SDK decodes a start's inputs and calls __init__ with
    # them before any of this code runs, so a start with none or with two would fail every
    # workflow task forever (a missing argument, a second input that is no RolloutRunState)
    # instead of failing the workflow with a message. Decoded as plain JSON here; the carried
    # state is converted below, exactly as the default converter did from the type hint.
    @workflow.init
    def __init__(self, *inputs: Any) -> None:
        info = workflow.info()
        self._input_problem = _workflow_id_problem(info.workflow_id) or _input_problem(
            len(inputs), continued=info.continued_run_id is not None
        )
        self._request: Any = inputs[0] if inputs and self._input_problem is None else None
        carried: RolloutRunState | None = None
        if len(inputs) == 2 and self._input_problem is None:
            converter = workflow.payload_converter()
            carried = converter.from_payload(converter.to_payload(inputs[1]), RolloutRunState)
        self._resumed = carried is not None
        # The whole run state in one object (continue-as-new carries it); what follows is
        # only what lives and dies with this run's code: deliveries in flight, the current wait.
        self._state = carried or RolloutRunState.start(self._request, workflow_id=info.workflow_id)
        self._notifications: list[asyncio.Future[Any]] = []
        # What the main loop waits for while it is parked in _wait_until (None while it runs or
        # awaits an activity): an update answers once the rollout waits for something it did not give.
        self._parked_on: Callable[[], bool] | None = None
        # True while it waits to continue as new between two stages: parked, but not on anything
        # a command waits for (the next stage is published by the next run).
        self._between_stages = False
        # The latest moment a timer of this run is known to have fired at: see _clock.
        self._timers_fired_by: datetime | None = None
        # A freeze ended since the rollout last asked whether it is frozen: a frozen wait ends.
        self._freeze_ended = False

    @property
    def _progress(self) -> RolloutProgress:
        return self._state.progress

    @property
    def _lock_run_id(self) -> str:
        """The run id the rollout holds its config's lock (and keys its store writes) under: its
        first run's, for every run continue-as-new starts after it."""
        return workflow.info().first_execution_run_id

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
        except _ContinueAsNew:
            pass
        workflow.continue_as_new(args=[request, self._state])

    def _refuse_input(self, problem: str) -> NoReturn:
        """Fail the workflow at once, as a refused request: nothing was published or locked."""
        message = str(InvalidRequestError([Problem("", problem)]))
        self._progress.reason = message
        self._transition(RolloutState.FAILED, SYSTEM_ACTOR, message)
        raise ApplicationError(
            message,
            [{"pointer": "", "message": problem}],
            type=INVALID_REQUEST_ERROR,
            non_retryable=True,
        )

    async def _run(self, request: Any, *, resumed: bool) -> RolloutResult:
        self._upsert_search_attributes()
        try:
            if resumed and self._state.plan is not None:
                plan = self._state.plan
                self._refresh_view()
            else:
                with rollout_step("prepare"):
                    plan = await self._prepare(request)
                self._state.set_plan(
                    plan,
                    change_texts_in_digest=bool(plan.changes)
                    and not workflow.patched(CHANGESET_PLAN_DIGEST),
                )
                if plan.paths_attribute and workflow.patched(SEARCH_ATTRIBUTE_PATHS):
                    self._state.pending_paths = plan.paths()
                self._upsert_search_attributes()
            bypassed = await self._run_stages(plan)
            await self._pass_gates(plan, None)
            with rollout_step("promote", {"version": plan.version}):
                return await self._promote(plan, bypassed=bypassed)
        except _StopRollout as stop:
            return self._end(await self._revert(stop.outcome, stop.reason, stop.by), stop.by)
        except ActivityError as error:
            if isinstance(error.cause, CancelledError):
                self._keep_result(
                    await self._revert(Outcome.CANCELLED, "the workflow was cancelled", "temporal")
                )
                raise
            # A step failed past its retries (e.g. the lock was taken over): never leave it half-done.
            reverted = await self._revert(Outcome.REVERTED, f"{error.cause or error}", SYSTEM_ACTOR)
            return self._end(reverted, SYSTEM_ACTOR)
        except asyncio.CancelledError:
            # Cancellation (e.g. from the Web UI): put every client back on stable, then end as cancelled.
            self._keep_result(
                await self._revert(Outcome.CANCELLED, "the workflow was cancelled", "temporal")
            )
            raise

    def _end(self, result: RolloutResult, by: str) -> RolloutResult:
        """A reverted or halted rollout fails (tempoconf.rollout.outcomes), its result in the failure's
        details; runs that ended before the patch completed with every outcome, and replay so."""
        if result.outcome in COMPLETED_OUTCOMES or not workflow.patched(OUTCOME_STATUSES):
            return result
        raise ending_error(result, by=by) from None  # its reason says why; no internal cause

    def _keep_result(self, result: RolloutResult) -> None:
        """A cancelled run ends Canceled, and a cancellation carries no result: keep it in the
        memo (tempoconf.rollout.outcomes) before the workflow ends."""
        if workflow.patched(OUTCOME_STATUSES):
            workflow.upsert_memo({RESULT_MEMO: result_json(result)})

    async def _prepare(self, request: Any) -> RolloutPlan:
        info = workflow.info()
        try:
            plan: RolloutPlan = await workflow.execute_activity(
                PREPARE_ACTIVITY,
                PrepareInput(
                    request=request, workflow_id=info.workflow_id, run_id=self._lock_run_id
                ),
                result_type=RolloutPlan,
                start_to_close_timeout=STORE_WRITE_TIMEOUT,
                heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
                retry_policy=PREPARE_RETRY,
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
                    await self._end_failed_prepare(reason)
                    audited = True
                else:  # runs that failed their prepare before this worker: as they did
                    await self._revert(Outcome.REVERTED, reason, SYSTEM_ACTOR)
            message = cause.message if isinstance(cause, ApplicationError) else str(error)
            self._progress.reason = message
            # A refused request wrote nothing (and a refusal for a running rollout must not write
            # into that one's trail); a failed prepare's `rollout.failed` is in the log already.
            self._transition(RolloutState.FAILED, SYSTEM_ACTOR, message, audit=not audited)
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
        self._raise_if_halted()
        state = self._state
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
                await self._continue_as_new_if_due()
            if runs(StageStep.PUBLISH):
                state.step = StageStep.PUBLISH
                await self._pass_gates(plan, stage)
                with rollout_step("publish", _stage_attributes(plan, stage), ends_ok=_GOES_ON):
                    await self._publish(plan, stage)
            self._raise_if_halted()
            if runs(StageStep.HOLD):
                resumed_hold = resume == StageStep.HOLD
                state.step = StageStep.HOLD
                with rollout_step("hold", _stage_attributes(plan, stage), ends_ok=_GOES_ON):
                    await self._hold(plan, stage, resumed=resumed_hold)
            if stage.min_applied is not None and state.bypass is None and runs(StageStep.APPLY):
                resumed_gate = resume == StageStep.APPLY
                state.step = StageStep.APPLY
                await self._await_applied(plan, stage, resumed=resumed_gate)
            if state.bypass:
                return True
            if runs(StageStep.CHECK):
                resumed_check = resume == StageStep.CHECK
                state.step = StageStep.CHECK
                with rollout_step("check", _stage_attributes(plan, stage), ends_ok=_GOES_ON):
                    await self._check_health(plan, stage, resumed=resumed_check)
            if stage.manual and state.bypass is None and runs(StageStep.APPROVAL):
                resumed_approval = resume == StageStep.APPROVAL
                state.step = StageStep.APPROVAL
                await self._await_approval(stage, resumed=resumed_approval)
            if state.bypass:
                return True
            state.step = StageStep.SETTLE
            await self._wait_until(
                lambda: not self._progress.pause_reasons or self._state.bypass is not None
            )
            state.mark_stage(stage.index, StageStatus.PASSED)
        return state.bypass is not None

    async def _pass_gates(self, plan: RolloutPlan, stage: PlannedStage | None) -> None:
        """Before `stage` is published (None: before the promote), wait while outside every change
        window (a durable timer to the next opening, no polling) or while the namespace is frozen
        (the freeze activity is asked again at the freeze's `until`, every 30 s, a worker
        setting, and at once when told a freeze ended: `freeze_ended_signal`). Halt, revert and
        cancel end the wait at once (`_wait_until`); leases are renewed meanwhile. A bypass skips the
        window (an operator's explicit decision), never a freeze: only `override_freeze` passes
        one. A rollout paused while it waited stays where it is until resume, then looks again."""
        if not workflow.patched(CHANGE_GATES):
            return  # runs started before gates existed: as they did
        state = self._state
        info = workflow.info()
        if stage is None:
            step, step_key = "promote", "promote"
        else:
            step = f"stage {stage.index + 1}/{len(plan.stages)} {stage.name}"
            step_key = f"stage:{stage.index}"
        waited = False
        while True:
            self._raise_if_halted()
            now = self._clock()
            opening = None if state.bypass is not None else next_opening(plan.windows, now)
            if opening is not None and opening.at > now:
                gate = f"the change window, opens {opening.label()}"
                reason = f"waiting for {gate} (in {time_left((opening.at - now).total_seconds())}) before {step}"
                self._enter_gate(
                    stage, RolloutState.WAITING_FOR_WINDOW, gate, opening.at.isoformat(), reason
                )
                waited = True
                await self._wait_until(
                    lambda: self._state.bypass is not None,
                    deadline=opening.at,
                    summary=f"wait for the change window: opens {opening.label()}",
                )
                continue
            namespaces = ", ".join(dict.fromkeys(config[0] for config in plan.configs()))
            # Cleared before asking: a freeze that ends while the activity runs wakes the wait.
            self._freeze_ended = False
            freeze: CheckFreezeResult = await workflow.execute_activity(
                CHECK_FREEZE_ACTIVITY,
                CheckFreezeInput(
                    namespace=plan.namespace,
                    path=plan.path,
                    workflow_id=info.workflow_id,
                    run_id=self._lock_run_id,
                    version=plan.version,
                    step=step,
                    step_key=step_key,
                    # A rollback is the way back to a known version: a freeze never holds it.
                    override_reason=plan.override_freeze
                    or (ROLLBACK_PASSES_FREEZES if plan.rollback else None),
                    actor=plan.author,
                    configs=[GatedConfig(*config) for config in plan.configs()]
                    if plan.changes
                    else [],
                ),
                result_type=CheckFreezeResult,
                start_to_close_timeout=STORE_WRITE_TIMEOUT,
                heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
                retry_policy=STORE_RETRY,
                summary=f"is namespace {namespaces} frozen? (before {step})",
            )
            if freeze.overridden:
                self._note(
                    plan.author or SYSTEM_ACTOR,
                    f"passed a freeze ({plan.override_freeze or ROLLBACK_PASSES_FREEZES}): "
                    f"{freeze.message}",
                )
            if freeze.frozen:
                recheck = self._clock() + timedelta(seconds=freeze.recheck_seconds)
                if freeze.until is not None:
                    recheck = min(recheck, datetime.fromisoformat(freeze.until))
                self._enter_gate(
                    stage,
                    RolloutState.FROZEN,
                    freeze.message,
                    freeze.until,
                    f"{freeze.message}; waiting before {step}",
                )
                waited = True
                await self._wait_until(
                    lambda: self._freeze_ended,
                    deadline=recheck,
                    summary=f"namespace {namespaces} frozen: look again",
                )
                continue
            if waited and state.progress.pause_reasons and state.bypass is None:
                await self._wait_until(
                    lambda: not self._progress.pause_reasons or self._state.bypass is not None
                )
                continue
            break
        if waited:
            self._progress.gate = self._progress.gate_until = None
            self._refresh_view()

    def _enter_gate(
        self,
        stage: PlannedStage | None,
        to_state: RolloutState,
        gate: str,
        until: str | None,
        reason: str,
    ) -> None:
        """Show what the rollout waits for; a transition only when that changed (a freeze looked at
        again every 30 s adds nothing to the history while it holds)."""
        progress = self._progress
        if stage is not None and progress.stage_index != stage.index:
            # The wait belongs to the stage it holds back (a continue-as-new resumes it there).
            self._state.enter_stage(stage)
        if progress.state == to_state and progress.gate == gate:
            return
        progress.gate, progress.gate_until = gate, until
        self._transition(to_state, SYSTEM_ACTOR, reason)

    async def _publish(self, plan: RolloutPlan, stage: PlannedStage) -> None:
        info = workflow.info()
        self._state.enter_stage(stage)
        self._transition(
            RolloutState.PUBLISHING,
            SYSTEM_ACTOR,
            f"publishing stage {stage.index + 1}/{len(plan.stages)} {stage.name} ({stage.cohort()})",
        )
        # The audit log says "publishing" before the publish activity writes "stage.published".
        await self._audit_transitions()
        result = await workflow.execute_activity(
            PUBLISH_STAGE_ACTIVITY,
            PublishStageInput(
                plan=plan, stage=stage, workflow_id=info.workflow_id, run_id=self._lock_run_id
            ),
            result_type=PublishStageResult,
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
            heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"publish stage {stage.index + 1}/{len(plan.stages)} {stage.name} ({stage.cohort()})",
        )
        self._state.stage_published(
            stage,
            published_at=result.published_at,
            expires_at=result.expires_at,
            now=self._clock(),
        )
        self._notify("stage_published", f"stage {stage.name} reaches {stage.cohort()}")

    async def _hold(self, plan: RolloutPlan, stage: PlannedStage, *, resumed: bool) -> None:
        """Hold the stage for its cooldown: a durable timer. Checks with an `interval` run beside it
        in one activity (`watch_stage_health`), which returns only when one trips its
        `failure_limit` (the rollout reverts at once) and is cancelled when the hold ends."""
        progress = self._progress
        if resumed and progress.hold_deadline is not None:
            # A run continued as new in the middle of the hold: the same hold, the same deadline.
            deadline = datetime.fromisoformat(progress.hold_deadline)
        else:
            deadline = self._clock() + timedelta(seconds=stage.cooldown_seconds)
            self._state.start_hold(stage, deadline=deadline)
            self._transition(
                RolloutState.HOLDING,
                SYSTEM_ACTOR,
                f"holding {stage.name} for {stage.cooldown_seconds:g}s",
            )
        watch = self._start_health_watch(plan, stage, deadline)

        def hold_cut_short() -> bool:
            return self._state.advance_requested or self._state.bypass is not None

        summary = f"hold {stage.name} ({stage.cooldown_seconds:g}s cooldown)"
        try:
            while True:
                running = watch

                def hold_over(running: asyncio.Task[WatchHealthResult] | None = running) -> bool:
                    return hold_cut_short() or (running is not None and running.done())

                await self._wait_until(
                    hold_over,
                    deadline=deadline,
                    summary=summary,
                )
                if watch is None or not watch.done():
                    break
                # A check tripped (this raises), or the watch's time was up a moment before the
                # timer fired: wait on for the timer.
                finished, watch = watch, None
                self._health_watch_ended(stage, finished)
        finally:
            if watch is not None and not watch.done():
                # TRY_CANCEL: the rollout moves on (a halt reverts) at once, without waiting for
                # the watch to hear of the cancellation at its next heartbeat (up to 8 s). The
                # checks only read, so an attempt that runs on a moment changes nothing.
                watch.add_done_callback(_ignore_outcome)
                watch.cancel()
            self._state.health_watch_since = None
        progress.hold_deadline = None
        self._refresh_view()

    def _start_health_watch(
        self, plan: RolloutPlan, stage: PlannedStage, deadline: datetime
    ) -> asyncio.Task[WatchHealthResult] | None:
        """Start the activity that runs the hold's interval checks, if the stage has any."""
        now = self._clock()
        if not any(check.interval_seconds for check in stage.health) or now >= deadline:
            return None
        hold_seconds = (deadline - now).total_seconds()
        watch = workflow.start_activity(
            WATCH_HEALTH_ACTIVITY,
            WatchHealthInput(
                plan=plan,
                stage=stage,
                hold_seconds=hold_seconds,
                offset_seconds=max(stage.cooldown_seconds - hold_seconds, 0.0),
                published_at=self._progress.stages[stage.index].published_at,
                failures=dict(self._state.failures),
            ),
            result_type=WatchHealthResult,
            # It ends by itself when the hold's time is up; the slowest round may run past that.
            start_to_close_timeout=timedelta(
                seconds=hold_seconds + stage.seconds_per_check_run(list(range(len(stage.health))))
            )
            + STORE_WRITE_TIMEOUT,
            heartbeat_timeout=HEALTH_HEARTBEAT_TIMEOUT,
            retry_policy=HEALTH_WATCH_RETRY,
            cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
            summary=f"interval health checks of {stage.name} during its hold",
        )
        self._state.health_watch_since = now.isoformat()
        self._refresh_view()
        return watch

    def _health_watch_ended(
        self, stage: PlannedStage, watch: asyncio.Task[WatchHealthResult]
    ) -> None:
        """The watch returned: a check tripped (revert), or the hold's time is up (carry its
        failures in a row into the end-of-hold check)."""
        self._state.health_watch_since = None
        try:
            result = watch.result()
        except ActivityError as error:
            if isinstance(error.cause, CancelledError):
                raise
            # Retried for as long as the hold lasts, so this is a timeout: the hold's end judges.
            self._note(SYSTEM_ACTOR, f"interval health checks stopped: {error.cause or error}")
            return
        self._state.failures.update(result.failures)
        if result.report is not None:
            self._progress.last_health = result.report
        self._refresh_view()
        if result.tripped:
            raise _StopRollout(
                Outcome.REVERTED,
                f"stage {stage.name} is unhealthy: " + "; ".join(result.tripped),
                SYSTEM_ACTOR,
            )

    async def _await_applied(
        self, plan: RolloutPlan, stage: PlannedStage, *, resumed: bool
    ) -> None:
        """The gate on applied versions (tempoconf.gates.applied_gate): after the cooldown, hold until the
        stage's `min_applied` share of its cohort reports the version applied, checking through an
        activity and rechecking on a durable timer. Past `apply_timeout` (from the stage's
        publish) it reverts, or with `on_apply_timeout: hold` waits in `apply_timed_out` for an
        operator. `advance` passes the gate as it is, `bypass` promotes, `halt` reverts."""
        state, progress = self._state, self._progress
        deadline: datetime | None = None
        if stage.apply_timeout_seconds is not None and progress.stage_started_at is not None:
            deadline = datetime.fromisoformat(progress.stage_started_at) + timedelta(
                seconds=stage.apply_timeout_seconds
            )
        if not (resumed and RolloutState(progress.state) in APPLY_GATE_STATES):
            state.start_apply_gate()
            self._transition(
                RolloutState.WAITING_FOR_APPLY,
                SYSTEM_ACTOR,
                f"cooldown of {stage.name} passed; waiting for {(stage.min_applied or 1) * 100:g}% "
                f"of its cohort to apply {plan.version}",
            )

        def passed() -> bool:
            return state.advance_requested or state.bypass is not None

        while progress.state != RolloutState.APPLY_TIMED_OUT:
            gate = await self._check_applied(plan, stage, deadline)
            if passed():
                return
            if gate.met:
                self._note(SYSTEM_ACTOR, f"apply gate of {stage.name} met: {describe_gate(gate)}")
                return
            now = self._clock()
            if deadline is not None and now >= deadline:
                reason = (
                    f"apply timeout of stage {stage.name} "
                    f"({stage.apply_timeout_seconds or 0:g}s) passed: {describe_gate(gate)}"
                )
                if stage.on_apply_timeout != "hold":
                    raise _StopRollout(Outcome.REVERTED, reason, SYSTEM_ACTOR)
                gate.timed_out = True
                self._transition(RolloutState.APPLY_TIMED_OUT, SYSTEM_ACTOR, reason + "; held")
                break
            wake = now + timedelta(seconds=APPLY_RECHECK_SECONDS)
            await self._wait_until(
                passed,
                deadline=wake if deadline is None else min(wake, deadline),
                summary=f"re-check which share of {stage.name}'s cohort applied {plan.version}",
            )
            if passed():
                return
        # Held past the timeout: only an operator moves it on (advance, bypass) or back (halt).
        await self._wait_until(passed)

    async def _check_applied(
        self, plan: RolloutPlan, stage: PlannedStage, deadline: datetime | None
    ) -> AppliedGate:
        gate: AppliedGate = await workflow.execute_activity(
            CHECK_APPLIED_ACTIVITY,
            CheckAppliedInput(
                namespace=plan.namespace,
                path=plan.path,
                version=plan.version,
                stage=stage,
                cohort=cohort_stages(plan, stage),
                configs=[GatedConfig(*config) for config in plan.configs()] if plan.changes else [],
                bucket_key=plan.bucket_key,
            ),
            result_type=AppliedGate,
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
            heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
            retry_policy=STORE_RETRY,  # a read: a store outage holds the gate, never passes it
            summary=f"which share of {stage.name}'s cohort applied {plan.version}",
        )
        gate.deadline = deadline.isoformat() if deadline is not None else None
        self._progress.applied = gate
        self._refresh_view()
        self._raise_if_halted()
        return gate

    async def _check_health(self, plan: RolloutPlan, stage: PlannedStage, *, resumed: bool) -> None:
        """The end-of-hold verdict: every check must pass (no data: its `on_no_data` decides).

        A check that fails fewer than `failure_limit` times in a row is looked at again after its
        interval, so one bad sample does not revert a rollout that asked for tolerance.
        """
        if not stage.health:
            self._progress.last_health = HealthReport(
                healthy=True,
                summary="no health checks configured",
                checked_at=self._now_iso(),
                stage=stage.name,
            )
            return
        if not resumed:
            self._transition(
                RolloutState.CHECKING_HEALTH, SYSTEM_ACTOR, f"checking the health of {stage.name}"
            )
        pending = list(range(len(stage.health)))
        while True:
            report = await self._run_checks(plan, stage, pending)
            if self._state.bypass is not None:
                return
            pending = [result.index for result in report.checks if result.verdict == UNHEALTHY]
            if not pending:
                return
            recheck = min(
                stage.health[index].interval_seconds or DEFAULT_RECHECK_SECONDS for index in pending
            )
            await self._wait_until(
                lambda: self._state.bypass is not None,
                deadline=self._clock() + timedelta(seconds=recheck),
                summary=f"re-check {len(pending)} failing health check(s) of {stage.name}",
            )
            if self._state.bypass is not None:
                return

    async def _run_checks(
        self, plan: RolloutPlan, stage: PlannedStage, indices: list[int]
    ) -> HealthReport:
        """Run some of the stage's checks; revert once a check has failed `failure_limit` times in a row."""
        try:
            report: HealthReport = await workflow.execute_activity(
                CHECK_HEALTH_ACTIVITY,
                CheckHealthInput(
                    plan=plan,
                    stage=stage,
                    final=True,
                    check_indices=indices,
                    published_at=self._progress.stages[stage.index].published_at,
                ),
                result_type=HealthReport,
                start_to_close_timeout=_health_check_timeout(stage, indices),
                heartbeat_timeout=HEALTH_HEARTBEAT_TIMEOUT,
                retry_policy=HEALTH_CHECK_RETRY,
                summary=f"final health check of {stage.name} ({len(indices)} check(s))",
            )
        except ActivityError as error:
            if isinstance(error.cause, CancelledError):
                raise  # the workflow is being cancelled, not the checks failing
            # The checks could not even run (worker lost, say) past their retries: that is a failure.
            reason = f"health checks could not run: {error.cause or error}"
            report = HealthReport(
                healthy=False,
                summary=reason,
                checked_at=self._now_iso(),
                stage=stage.name,
                checks=[
                    CheckResult(
                        index=index,
                        name=f"check #{index + 1}",
                        kind="?",
                        verdict=UNHEALTHY,
                        summary=reason,
                    )
                    for index in indices
                ],
                final=True,
            )
        self._progress.last_health = report
        self._refresh_view()
        self._raise_if_halted()
        if self._state.bypass is not None:
            return report
        tripped = self._state.count_failures(stage, report)
        if tripped:
            raise _StopRollout(
                Outcome.REVERTED,
                f"stage {stage.name} is unhealthy: " + "; ".join(tripped),
                SYSTEM_ACTOR,
            )
        return report

    async def _await_approval(self, stage: PlannedStage, *, resumed: bool) -> None:
        if not resumed:
            self._progress.approved = False
            self._transition(
                RolloutState.AWAITING_APPROVAL,
                SYSTEM_ACTOR,
                f"stage {stage.name} passed; waiting for approve",
            )
            self._notify("awaiting_approval", f"stage {stage.name} passed its hold and checks")
        await self._wait_until(lambda: self._progress.approved or self._state.bypass is not None)

    async def _wait_until(
        self,
        done: Callable[[], bool],
        *,
        deadline: datetime | None = None,
        summary: str | None = None,
    ) -> None:
        """Wait for `done()` or the deadline, renewing leases on the way; a halt raises _StopRollout.

        A loop of wait_condition with the remaining time, so signals can end or change the wait
        (samples-python `updatable_timer`).
        """
        while True:
            self._raise_if_halted()
            await self._audit_transitions()
            now = self._clock()
            if done() or (deadline is not None and now >= deadline):
                return
            renewal = self._state.next_lease_renewal()
            if renewal is not None and now >= renewal:
                await self._renew_leases()
                continue
            wake_at = min(
                (moment for moment in (deadline, renewal) if moment is not None), default=None
            )

            def wakes() -> bool:
                return self._state.halt is not None or done()

            if self._continue_as_new_due():
                await self._continue_as_new(wakes, wake_at)
                continue

            self._parked_on = wakes
            try:
                # Also wake to audit what a command recorded meanwhile (a pause during a long hold).
                await workflow.wait_condition(
                    lambda: wakes() or self._has_unaudited(),
                    timeout=None if wake_at is None else wake_at - now,
                    timeout_summary=summary,
                )
            except TimeoutError:
                self._timer_fired(wake_at)
            finally:
                self._parked_on = None

    def _continue_as_new_due(self) -> bool:
        """The server suggests it (history a few thousand events long, or large), or the worker's
        own bound (the plan's `continue_as_new_after_events`) is reached."""
        info = workflow.info()
        plan = self._state.plan
        limit = plan.continue_as_new_after_events if plan is not None else 0
        return info.is_continue_as_new_suggested() or (
            limit > 0 and info.get_current_history_length() >= limit
        )

    async def _continue_as_new_if_due(self) -> None:
        if self._continue_as_new_due():
            self._between_stages = True
            try:
                await self._continue_as_new(lambda: self._state.halt is not None, None)
            finally:
                self._between_stages = False

    async def _continue_as_new(self, wakes: Callable[[], bool], wake_at: datetime | None) -> None:
        """Go on as a new run carrying the whole state, once deliveries and handlers in flight have
        finished; returns instead when something the rollout must act on first arrives meanwhile
        (a halt, the end of the wait) or the wait's time is up."""
        await self._audit_transitions()
        await self._finish_notifications()
        self._parked_on = wakes  # an update that waits for the rollout to settle answers now
        try:
            await workflow.wait_condition(
                lambda: wakes() or (workflow.all_handlers_finished() and not self._has_unaudited()),
                timeout=None if wake_at is None else max(wake_at - self._clock(), timedelta(0)),
                timeout_summary="let operator commands in flight finish before continue-as-new",
            )
        except TimeoutError:
            self._timer_fired(wake_at)
            return
        finally:
            self._parked_on = None
        if wakes() or self._has_unaudited() or not workflow.all_handlers_finished():
            return
        self._notifications.clear()
        self._state.runs += 1
        raise _ContinueAsNew()

    async def _renew_leases(self) -> None:
        leases = self._state.leases
        result = await workflow.execute_activity(
            RENEW_LEASES_ACTIVITY,
            RenewLeasesInput(
                namespace=self._progress.namespace,
                path=self._progress.path,
                run_id=self._lock_run_id,
                expirations=dict(leases),
            ),
            result_type=RenewLeasesResult,
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
            heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"renew the leases of {len(leases)} live stage(s)",
        )
        self._state.leases_renewed(result.expires_at, now=self._clock())

    async def _promote(self, plan: RolloutPlan, *, bypassed: bool) -> RolloutResult:
        info = workflow.info()
        by, reason = self._state.promotion(system_actor=SYSTEM_ACTOR)
        self._transition(RolloutState.PROMOTING, by, reason)
        await self._audit_transitions()
        promotion = asyncio.ensure_future(
            workflow.execute_activity(
                PROMOTE_ACTIVITY,
                PromoteInput(
                    plan=plan,
                    workflow_id=info.workflow_id,
                    run_id=self._lock_run_id,
                    actor=by,
                    reason=reason,
                ),
                start_to_close_timeout=STORE_WRITE_TIMEOUT,
                heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
                retry_policy=STORE_RETRY,
                summary=f"promote {plan.version} to stable",
            )
        )
        if await _finish_despite_cancellation(promotion):
            # Too late to cancel: the version is (being made) stable. Say so, and end promoted.
            self._note(
                "temporal",
                "cancellation requested while promoting: ignored, the promotion completed",
            )
        outcome = Outcome.BYPASSED if bypassed else Outcome.PROMOTED
        self._state.finish(outcome, reason, stable_version=plan.version)
        self._transition(RolloutState(outcome.value), by, reason, audit=False)
        self._notify(outcome.value, reason)
        await self._finish_notifications()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return RolloutResult(
            outcome=outcome, version=plan.version, reason=reason, stable_version=plan.version
        )

    async def _end_failed_prepare(self, reason: str) -> None:
        """Release what a failed prepare may have taken (the lock, the rollout row) and end the
        audit trail with `rollout.failed`, in one store transaction: also when it took nothing,
        since it may have written `rollout.started` (and `rollout.reverting` is written here)."""
        info = workflow.info()
        self._progress.reason = reason
        self._transition(RolloutState.REVERTING, SYSTEM_ACTOR, reason)
        await self._audit_transitions()
        release = asyncio.ensure_future(
            workflow.execute_activity(
                REVERT_ACTIVITY,
                RevertInput(
                    namespace=self._progress.namespace,
                    path=self._progress.path,
                    workflow_id=info.workflow_id,
                    run_id=self._lock_run_id,
                    outcome=RolloutState.FAILED.value,
                    actor=SYSTEM_ACTOR,
                    reason=reason,
                    audit_always=True,
                ),
                result_type=RevertResult,
                start_to_close_timeout=STORE_WRITE_TIMEOUT,
                heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
                retry_policy=REVERT_RETRY,
                summary=f"release what the failed prepare took ({reason})",
            )
        )
        if await _finish_despite_cancellation(release):
            raise asyncio.CancelledError()

    async def _revert(self, outcome: Outcome, reason: str, by: str) -> RolloutResult:
        """The compensation. A cancellation that arrives meanwhile waits for it to finish (every
        client back on stable first), then ends the workflow as cancelled."""
        with rollout_step("revert", {"outcome": outcome.value, "reason": reason}):
            revert = asyncio.ensure_future(self._revert_now(outcome, reason, by))
            if await _finish_despite_cancellation(revert):
                self._keep_result(revert.result())
                raise asyncio.CancelledError()
            return revert.result()

    async def _revert_now(self, outcome: Outcome, reason: str, by: str) -> RolloutResult:
        info = workflow.info()
        self._progress.reason = reason
        self._transition(RolloutState.REVERTING, by, reason)
        await self._audit_transitions()
        reverted = await workflow.execute_activity(
            REVERT_ACTIVITY,
            RevertInput(
                namespace=self._progress.namespace,
                path=self._progress.path,
                workflow_id=info.workflow_id,
                run_id=self._lock_run_id,
                outcome=outcome.value,
                actor=by,
                reason=reason,
            ),
            result_type=RevertResult,
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
            heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
            retry_policy=REVERT_RETRY,
            summary=f"revert: clear the live stages, every client back on stable if any ({reason})",
        )
        # What clients are back on: the stable version, or none (the phase must not say "stable").
        self._state.finish(outcome, reason, stable_version=reverted.stable_version)
        self._transition(RolloutState(outcome.value), by, reason, audit=False)
        self._notify(outcome.value, reason)
        if outcome is not Outcome.CANCELLED:
            await self._finish_notifications()
            await workflow.wait_condition(workflow.all_handlers_finished)
        return RolloutResult(
            outcome=outcome,
            version=self._progress.version,
            reason=reason,
            stable_version=reverted.stable_version,
        )

    # -- notifications -------------------------------------------------------------------------
    def _notify(self, event: str, reason: str) -> None:
        """Start one webhook delivery per URL without waiting for it (a slow hook never holds a stage)."""
        plan = self._state.plan
        if plan is None or not plan.webhooks:
            return
        body = self._state.webhook_body(event, reason, run_id=self._lock_run_id, at=self._now_iso())
        for url in plan.webhooks:
            self._state.deliveries_started += 1
            delivery = workflow.start_activity(
                NOTIFY_ACTIVITY,
                NotifyInput(url=url, body=body),
                start_to_close_timeout=WEBHOOK_TIMEOUT,
                retry_policy=WEBHOOK_RETRY,
                summary=f"notify {event} to {url}",
            )
            # A failed delivery is read as soon as it ends (the worker logged its attempts):
            # a run that never gathers it (cancelled, or let go by a stopping worker) would
            # otherwise leave asyncio to report it "never retrieved", tracebacks and all.
            delivery.add_done_callback(_ignore_outcome)
            self._notifications.append(delivery)

    async def _finish_notifications(self) -> None:
        """Let deliveries in flight end before the workflow does; their failures are ignored."""
        if self._notifications:
            await asyncio.gather(*self._notifications, return_exceptions=True)

    # -- state bookkeeping ---------------------------------------------------------------------
    def _transition(
        self, to_state: RolloutState, by: str, reason: str, *, audit: bool = True
    ) -> None:
        """Move to a named state, recording who and why (history, audit log, search attributes, UI)."""
        self._state.transition(to_state, by, reason, at=self._now_iso(), audit=audit)
        self._refresh_view()

    def _note(self, by: str, reason: str) -> None:
        """Record an operator command that does not change the state (pause, approve, ...)."""
        self._state.note(by, reason, at=self._now_iso())
        self._refresh_view()

    def _refresh_view(self) -> None:
        self._state.refresh()
        details = render_current_details(self._progress, self._state.plan, now=self._clock())
        since = self._state.health_watch_since
        if since is not None:
            # The watch cannot tell the workflow its verdicts without growing the history: say
            # where they are (the pending activity's heartbeat details).
            details += (
                f"\n\nInterval health checks: running in activity `{WATCH_HEALTH_ACTIVITY}` since "
                f"{since[:10]} {since[11:19]} UTC; their latest verdicts are in its heartbeat "
                "details (`temporal workflow describe`). The rollout reverts as soon as one trips."
            )
        workflow.set_current_details(details)
        self._upsert_search_attributes()

    def _has_unaudited(self) -> bool:
        return self._state.has_unaudited()

    async def _audit_transitions(self) -> None:
        """Write the transitions not yet in the audit log (idempotent: keyed by sequence number)."""
        history = self._progress.history
        sequences = self._state.take_unaudited()
        if not sequences:
            return
        info = workflow.info()
        await workflow.execute_activity(
            RECORD_TRANSITION_ACTIVITY,
            RecordTransitionsInput(
                namespace=self._progress.namespace,
                path=self._progress.path,
                workflow_id=info.workflow_id,
                run_id=self._lock_run_id,
                version=self._progress.version,
                transitions=[history[seq] for seq in sequences],
                sequences=sequences,
                single_config=self._state.plan is not None and not self._state.plan.changes,
            ),
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
            heartbeat_timeout=STORE_HEARTBEAT_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"audit {len(sequences)} transition(s)",
        )

    def _upsert_search_attributes(self) -> None:
        """Upsert the attributes whose value changed (each upsert is a history event)."""
        progress = self._progress
        changes = self._state.search_attribute_changes(
            {
                STATE_ATTRIBUTE.name: progress.state,
                PATH_ATTRIBUTE.name: progress.path,
                VERSION_ATTRIBUTE.name: progress.version,
                STAGE_ATTRIBUTE.name: progress.stage_name,
            }
        )
        updates: list[SearchAttributeUpdate[Any]] = [
            _SEARCH_ATTRIBUTE_KEYS[name].value_set(value) for name, value in changes.items()
        ]
        paths, self._state.pending_paths = self._state.pending_paths, []
        if paths:
            updates.append(PATHS_ATTRIBUTE.value_set(paths))
        if updates:
            workflow.upsert_search_attributes(updates)

    def _raise_if_halted(self) -> None:
        if self._state.halt is not None:
            raise _StopRollout(
                Outcome.HALTED,
                self._state.halt.reason or "halted by an operator",
                self._state.halt.by or "operator",
            )

    def _now_iso(self) -> str:
        return self._clock().isoformat()

    def _clock(self) -> datetime:
        """workflow.now(), never earlier than a deadline whose timer has fired.

        In a correct run the two agree (a task that sees a timer fire starts after it fired). SDK
        Core (temporalio 1.35.0) can replay a fired timer for a query at the time of an older task,
        and a worker with a workflow cache keeps what that replay decided: a wait that read the
        clock would see its deadline not yet reached and arm a second timer no later replay makes,
        a nondeterminism error that wedges the rollout (bench/findings/README.md). A fired timer
        means its deadline is reached, whatever the clock of that activation says."""
        now = workflow.now()
        fired = self._timers_fired_by
        return now if fired is None or fired <= now else fired

    def _timer_fired(self, deadline: datetime | None) -> None:
        if deadline is not None and (
            self._timers_fired_by is None or deadline > self._timers_fired_by
        ):
            self._timers_fired_by = deadline

    # -- operator commands (tempoconf.rollout.commands): each a signal and an update of the same name ----
    def _apply(self, command: CommandName, argument: OperatorCommand | None) -> Effect:
        """Act on an operator command, then show its effect."""
        given = argument or OperatorCommand()
        # A signal cannot be refused: text the store could not keep (a NUL) is replaced, so the
        # audit of this command records it instead of failing (updates refuse it: _refuse).
        # replace(): the command's other fields (an approval's digest) are carried as given.
        given = replace(
            given,
            reason=storable_text(given.reason),
            by=storable_text(given.by),
            digest=storable_text(given.digest),
        )
        effect = self._state.apply(command, given, at=self._now_iso())
        self._refresh_view()
        return effect

    def _refuse(self, command: CommandName, argument: OperatorCommand | None) -> None:
        """An update's validator: a refusal is answered before anything is written to history."""
        texts = (
            (("reason", argument.reason), ("by", argument.by), ("digest", argument.digest))
            if argument
            else ()
        )
        for field, text in texts:
            problem = text_problem(text)
            if problem is not None:
                raise ApplicationError(f"invalid {command.value} {field}: {problem}")
        refusal = self._state.refusal(command, argument)
        if refusal:
            raise ApplicationError(refusal)

    def _ended(self) -> bool:
        return self._state.ended()

    def _settled(self) -> bool:
        """The rollout acted on the command: it has ended, or waits for something the command did
        not give it (a hold's end, an approval, a resume, a re-check), its history audited."""
        if self._ended():
            return True
        # While it publishes, checks health, promotes or reverts, it is not parked: not yet.
        parked_on = self._parked_on
        return parked_on is not None and not parked_on() and not self._has_unaudited()

    async def _answer(
        self, command: CommandName, argument: OperatorCommand | None
    ) -> CommandResult:
        """Apply an update, wait (bounded) until it took effect, then answer where the rollout is."""
        effect = self._apply(command, argument)
        took_effect = {
            AnswerWhen.ENDED: self._ended,
            AnswerWhen.SETTLED: self._settled,
            AnswerWhen.AT_ONCE: None,
        }[COMMANDS[command].answer_when]
        in_effect = True
        if effect.accepted and took_effect is not None:
            try:
                await workflow.wait_condition(
                    took_effect,
                    timeout=STEERING_REPLY_TIMEOUT,
                    timeout_summary=f"answer {command} once it took effect",
                )
            except TimeoutError:
                in_effect = False
            else:
                # Parked only to go on as a new run: the command takes effect in that run.
                in_effect = self._ended() or not self._between_stages
        progress = self._progress
        return CommandResult(
            command=command,
            accepted=effect.accepted,
            state=progress.state,
            phase=progress.phase,
            stage=progress.stage_name,
            stage_number=progress.stage_index + 1 if progress.stage_index >= 0 else 0,
            stage_count=progress.stage_count,
            paused=progress.paused,
            message=(
                self._state.answer_message(command, effect)
                if in_effect
                else (effect.requested or effect.done)
            ),
        )

    @workflow.signal(name=CommandName.HALT)
    def halt_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.HALT, command)

    @workflow.update(name=CommandName.HALT)
    async def halt_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.HALT, command)

    @halt_update.validator
    def _validate_halt(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.HALT, command)

    @workflow.signal(name=CommandName.BYPASS)
    def bypass_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.BYPASS, command)

    @workflow.update(name=CommandName.BYPASS)
    async def bypass_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.BYPASS, command)

    @bypass_update.validator
    def _validate_bypass(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.BYPASS, command)

    @workflow.signal(name=CommandName.ADVANCE)
    def advance_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.ADVANCE, command)

    @workflow.update(name=CommandName.ADVANCE)
    async def advance_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.ADVANCE, command)

    @advance_update.validator
    def _validate_advance(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.ADVANCE, command)

    @workflow.signal(name=CommandName.PAUSE)
    def pause_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.PAUSE, command)

    @workflow.update(name=CommandName.PAUSE)
    async def pause_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.PAUSE, command)

    @pause_update.validator
    def _validate_pause(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.PAUSE, command)

    @workflow.signal(name=CommandName.RESUME)
    def resume_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.RESUME, command)

    @workflow.update(name=CommandName.RESUME)
    async def resume_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.RESUME, command)

    @resume_update.validator
    def _validate_resume(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.RESUME, command)

    @workflow.signal(name=CommandName.APPROVE)
    def approve_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.APPROVE, command)

    @workflow.update(name=CommandName.APPROVE)
    async def approve_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.APPROVE, command)

    @approve_update.validator
    def _validate_approve(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.APPROVE, command)

    @workflow.signal(name=FREEZE_ENDED_SIGNAL)
    def freeze_ended_signal(self, namespace: str | None = None) -> None:
        """A freeze ended (`namespace`'s; tempoconf.temporal.freeze_wakeup): a rollout waiting on one
        looks again now, not at its next look. Not an operator command: it changes nothing
        by itself, so it is neither refused nor audited; the look that follows is."""
        self._freeze_ended = True

    @workflow.query(name="status")
    def status(self) -> RolloutProgress:
        return self._progress
