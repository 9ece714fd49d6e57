"""`ConfigRollout`: one staged configuration rollout as a durable state machine.

prepare → for each stage: publish → hold (durable timer, leases renewed) → check health →
[approval] → promote. Halt, an unhealthy check or cancellation run the compensating revert.
Deterministic code only: every side effect is an activity, referred to by name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from tempoconf.activity_io import (
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
        CheckHealthInput,
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
    )
    from tempoconf.commands import COMMANDS, AnswerWhen, CommandName, OperatorCommand
    from tempoconf.details import render_current_details
    from tempoconf.health import UNHEALTHY
    from tempoconf.plan import PlannedStage, RolloutPlan
    from tempoconf.progress import (
        CheckResult,
        CommandResult,
        HealthReport,
        Outcome,
        RolloutProgress,
        RolloutResult,
        RolloutState,
        StageStatus,
    )
    from tempoconf.run_state import Effect, RolloutRunState
    from tempoconf.temporal import (
        PATH_ATTRIBUTE,
        SEARCH_ATTRIBUTES,
        STAGE_ATTRIBUTE,
        STATE_ATTRIBUTE,
        VERSION_ATTRIBUTE,
        WORKFLOW_TYPE,
    )

__all__ = ["ConfigRollout"]

# Store writes are short; a store outage is retried with backoff rather than failing the rollout.
STORE_WRITE_TIMEOUT = timedelta(seconds=30)
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
)
# Prepare gives up (and the workflow fails) after a bounded number of attempts: an operator is
# waiting on the CLI for it, and the lock it may hold is released by the revert that follows.
PREPARE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=8,
    non_retryable_error_types=[INVALID_REQUEST_ERROR, ROLLOUT_RUNNING_ERROR],
)
# The revert is the emergency path: it retries until it succeeds (unlimited attempts).
REVERT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=15),
)
# A check's own retries happen inside the activity; the activity is retried only for worker loss.
# Webhooks: a few tries, then given up; they never hold up or fail the rollout.
WEBHOOK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
WEBHOOK_TIMEOUT = timedelta(seconds=10)
HEALTH_CHECK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
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


class _StopRollout(Exception):
    """Internal: leave the stage loop and revert (halt or unhealthy)."""

    def __init__(self, outcome: Outcome, reason: str, by: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.by = by


@workflow.defn(name=WORKFLOW_TYPE)
class ConfigRollout:
    @workflow.init
    def __init__(self, request: Any) -> None:
        # The whole run state in one object (continue-as-new can carry it); what follows is
        # only what lives and dies with this run's code: deliveries in flight, the current wait.
        self._state = RolloutRunState.start(request, workflow_id=workflow.info().workflow_id)
        self._notifications: list[asyncio.Future[Any]] = []
        # What the main loop waits for while it is parked in _wait_until (None while it runs or
        # awaits an activity): an update answers once the rollout waits for something it did not give.
        self._parked_on: Callable[[], bool] | None = None

    @property
    def _progress(self) -> RolloutProgress:
        return self._state.progress

    # -- main loop -----------------------------------------------------------------------------
    @workflow.run
    async def run(self, request: Any) -> RolloutResult:
        self._upsert_search_attributes()
        try:
            plan = await self._prepare(request)
            self._state.set_plan(plan)
            self._upsert_search_attributes()
            bypassed = await self._run_stages(plan)
            return await self._promote(plan, bypassed=bypassed)
        except _StopRollout as stop:
            return await self._revert(stop.outcome, stop.reason, stop.by)
        except ActivityError as error:
            if isinstance(error.cause, CancelledError):
                await self._revert(Outcome.CANCELLED, "the workflow was cancelled", "temporal")
                raise
            # A step failed past its retries (e.g. the lock was taken over): never leave it half-done.
            return await self._revert(Outcome.REVERTED, f"{error.cause or error}", SYSTEM_ACTOR)
        except asyncio.CancelledError:
            # Cancellation (e.g. from the Web UI): put every client back on stable, then end as cancelled.
            await self._revert(Outcome.CANCELLED, "the workflow was cancelled", "temporal")
            raise

    async def _prepare(self, request: Any) -> RolloutPlan:
        info = workflow.info()
        try:
            plan: RolloutPlan = await workflow.execute_activity(
                PREPARE_ACTIVITY,
                PrepareInput(request=request, workflow_id=info.workflow_id, run_id=info.run_id),
                result_type=RolloutPlan,
                start_to_close_timeout=STORE_WRITE_TIMEOUT,
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
            if not refused:
                # Prepare may have taken the lock before failing: release it before failing.
                await self._revert(
                    Outcome.REVERTED, f"prepare failed: {cause or error}", SYSTEM_ACTOR
                )
            message = cause.message if isinstance(cause, ApplicationError) else str(error)
            self._progress.reason = message
            self._transition(RolloutState.FAILED, SYSTEM_ACTOR, message)
            raise ApplicationError(
                message,
                *(cause.details if isinstance(cause, ApplicationError) else ()),
                type=cause.type if isinstance(cause, ApplicationError) else "PrepareFailed",
                non_retryable=True,
            ) from None
        return plan

    async def _run_stages(self, plan: RolloutPlan) -> bool:
        """Walk the stages; True when a bypass cut the walk short."""
        self._raise_if_halted()
        for stage in plan.stages:
            if self._state.bypass:
                return True
            await self._publish(plan, stage)
            self._raise_if_halted()
            await self._hold(plan, stage)
            if self._state.bypass:
                return True
            await self._check_health(plan, stage)
            if stage.manual and self._state.bypass is None:
                await self._await_approval(stage)
            if self._state.bypass:
                return True
            await self._wait_until(
                lambda: not self._progress.pause_reasons or self._state.bypass is not None
            )
            self._state.mark_stage(stage.index, StageStatus.PASSED)
        return self._state.bypass is not None

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
                plan=plan, stage=stage, workflow_id=info.workflow_id, run_id=info.run_id
            ),
            result_type=PublishStageResult,
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"publish stage {stage.index + 1}/{len(plan.stages)} {stage.name} ({stage.cohort()})",
        )
        self._state.stage_published(
            stage,
            published_at=result.published_at,
            expires_at=result.expires_at,
            now=workflow.now(),
        )
        self._notify("stage_published", f"stage {stage.name} reaches {stage.cohort()}")

    async def _hold(self, plan: RolloutPlan, stage: PlannedStage) -> None:
        """Hold the stage for its cooldown; checks with an `interval` run during it and fail fast."""
        started = workflow.now()
        deadline = started + timedelta(seconds=stage.cooldown_seconds)
        self._state.start_hold(stage, deadline=deadline)
        self._transition(
            RolloutState.HOLDING,
            SYSTEM_ACTOR,
            f"holding {stage.name} for {stage.cooldown_seconds:g}s",
        )
        due = {
            index: started + timedelta(seconds=check.initial_delay_seconds)
            for index, check in enumerate(stage.health)
            if check.interval_seconds
        }

        def hold_cut_short() -> bool:
            return self._state.advance_requested or self._state.bypass is not None

        while True:
            next_check = min(due.values(), default=None)
            until = deadline if next_check is None or next_check >= deadline else next_check
            summary = f"hold {stage.name} ({stage.cooldown_seconds:g}s cooldown)"
            if next_check is not None and next_check < deadline:
                summary += ", next health check"
            await self._wait_until(hold_cut_short, deadline=until, summary=summary)
            now = workflow.now()
            if hold_cut_short() or now >= deadline:
                break
            ready = sorted(index for index, at in due.items() if at <= now)
            if ready:
                await self._run_checks(plan, stage, ready, final=False)
                for index in ready:
                    due[index] = now + timedelta(
                        seconds=stage.health[index].interval_seconds or 0.0
                    )
        self._progress.hold_deadline = None

    async def _check_health(self, plan: RolloutPlan, stage: PlannedStage) -> None:
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
        self._transition(
            RolloutState.CHECKING_HEALTH, SYSTEM_ACTOR, f"checking the health of {stage.name}"
        )
        pending = list(range(len(stage.health)))
        while True:
            report = await self._run_checks(plan, stage, pending, final=True)
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
                deadline=workflow.now() + timedelta(seconds=recheck),
                summary=f"re-check {len(pending)} failing health check(s) of {stage.name}",
            )
            if self._state.bypass is not None:
                return

    async def _run_checks(
        self, plan: RolloutPlan, stage: PlannedStage, indices: list[int], *, final: bool
    ) -> HealthReport:
        """Run some of the stage's checks; revert once a check has failed `failure_limit` times in a row."""
        try:
            report: HealthReport = await workflow.execute_activity(
                CHECK_HEALTH_ACTIVITY,
                CheckHealthInput(
                    plan=plan,
                    stage=stage,
                    final=final,
                    check_indices=indices,
                    published_at=self._progress.stages[stage.index].published_at,
                ),
                result_type=HealthReport,
                start_to_close_timeout=_health_check_timeout(stage, indices),
                retry_policy=HEALTH_CHECK_RETRY,
                summary=f"{'final' if final else 'interval'} health check of {stage.name} ({len(indices)} check(s))",
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
                final=final,
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

    async def _await_approval(self, stage: PlannedStage) -> None:
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
            now = workflow.now()
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

            self._parked_on = wakes
            try:
                # Also wake to audit what a command recorded meanwhile (a pause during a long hold).
                await workflow.wait_condition(
                    lambda: wakes() or self._has_unaudited(),
                    timeout=None if wake_at is None else wake_at - now,
                    timeout_summary=summary,
                )
            except TimeoutError:
                pass
            finally:
                self._parked_on = None

    async def _renew_leases(self) -> None:
        leases = self._state.leases
        result = await workflow.execute_activity(
            RENEW_LEASES_ACTIVITY,
            RenewLeasesInput(
                namespace=self._progress.namespace,
                path=self._progress.path,
                run_id=workflow.info().run_id,
                expirations=dict(leases),
            ),
            result_type=RenewLeasesResult,
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
            retry_policy=STORE_RETRY,
            summary=f"renew the leases of {len(leases)} live stage(s)",
        )
        self._state.leases_renewed(result.expires_at, now=workflow.now())

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
                    run_id=info.run_id,
                    actor=by,
                    reason=reason,
                ),
                start_to_close_timeout=STORE_WRITE_TIMEOUT,
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

    async def _revert(self, outcome: Outcome, reason: str, by: str) -> RolloutResult:
        """The compensation. A cancellation that arrives meanwhile waits for it to finish (every
        client back on stable first), then ends the workflow as cancelled."""
        revert = asyncio.ensure_future(self._revert_now(outcome, reason, by))
        if await _finish_despite_cancellation(revert):
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
                run_id=info.run_id,
                outcome=outcome.value,
                actor=by,
                reason=reason,
            ),
            result_type=RevertResult,
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
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
        body = self._state.webhook_body(
            event, reason, run_id=workflow.info().run_id, at=self._now_iso()
        )
        for url in plan.webhooks:
            self._state.deliveries_started += 1
            self._notifications.append(
                workflow.start_activity(
                    NOTIFY_ACTIVITY,
                    NotifyInput(url=url, body=body),
                    start_to_close_timeout=WEBHOOK_TIMEOUT,
                    retry_policy=WEBHOOK_RETRY,
                    summary=f"notify {event} to {url}",
                )
            )

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
        workflow.set_current_details(
            render_current_details(self._progress, self._state.plan, now=workflow.now())
        )
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
                run_id=info.run_id,
                version=self._progress.version,
                transitions=[history[seq] for seq in sequences],
                sequences=sequences,
            ),
            start_to_close_timeout=STORE_WRITE_TIMEOUT,
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
        if changes:
            workflow.upsert_search_attributes(
                [_SEARCH_ATTRIBUTE_KEYS[name].value_set(value) for name, value in changes.items()]
            )

    def _raise_if_halted(self) -> None:
        if self._state.halt is not None:
            raise _StopRollout(
                Outcome.HALTED,
                self._state.halt.reason or "halted by an operator",
                self._state.halt.by or "operator",
            )

    def _now_iso(self) -> str:
        return workflow.now().isoformat()

    # -- operator commands (tempoconf.commands): each a signal and an update of the same name ----
    def _apply(self, command: CommandName, argument: OperatorCommand | None) -> Effect:
        """Act on an operator command, then show its effect."""
        effect = self._state.apply(command, argument or OperatorCommand(), at=self._now_iso())
        self._refresh_view()
        return effect

    def _refuse(self, command: CommandName) -> None:
        """An update's validator: a refusal is answered before anything is written to history."""
        refusal = self._state.refusal(command)
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
            message=effect.done if in_effect else (effect.requested or effect.done),
        )

    @workflow.signal(name=CommandName.HALT)
    def halt_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.HALT, command)

    @workflow.update(name=CommandName.HALT)
    async def halt_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.HALT, command)

    @halt_update.validator
    def _validate_halt(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.HALT)

    @workflow.signal(name=CommandName.BYPASS)
    def bypass_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.BYPASS, command)

    @workflow.update(name=CommandName.BYPASS)
    async def bypass_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.BYPASS, command)

    @bypass_update.validator
    def _validate_bypass(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.BYPASS)

    @workflow.signal(name=CommandName.ADVANCE)
    def advance_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.ADVANCE, command)

    @workflow.update(name=CommandName.ADVANCE)
    async def advance_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.ADVANCE, command)

    @advance_update.validator
    def _validate_advance(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.ADVANCE)

    @workflow.signal(name=CommandName.PAUSE)
    def pause_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.PAUSE, command)

    @workflow.update(name=CommandName.PAUSE)
    async def pause_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.PAUSE, command)

    @pause_update.validator
    def _validate_pause(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.PAUSE)

    @workflow.signal(name=CommandName.RESUME)
    def resume_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.RESUME, command)

    @workflow.update(name=CommandName.RESUME)
    async def resume_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.RESUME, command)

    @resume_update.validator
    def _validate_resume(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.RESUME)

    @workflow.signal(name=CommandName.APPROVE)
    def approve_signal(self, command: OperatorCommand | None = None) -> None:
        self._apply(CommandName.APPROVE, command)

    @workflow.update(name=CommandName.APPROVE)
    async def approve_update(self, command: OperatorCommand | None = None) -> CommandResult:
        return await self._answer(CommandName.APPROVE, command)

    @approve_update.validator
    def _validate_approve(self, command: OperatorCommand | None = None) -> None:
        self._refuse(CommandName.APPROVE)

    @workflow.query(name="status")
    def status(self) -> RolloutProgress:
        return self._progress
