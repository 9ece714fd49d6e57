"""A stage's publish and its hold: the durable timer of its cooldown, with the interval health
checks running beside it in one activity (`watch_stage_health`) that trips the revert."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._audit import audit_transitions, note, refresh_view, transition
from tempoconf.workflows.rollout._notify import notify
from tempoconf.workflows.rollout._run import SYSTEM_ACTOR, RolloutRun, ignore_outcome, unhealthy
from tempoconf.workflows.rollout._waiting import wait_until

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.activity_io import PublishStageInput, WatchHealthInput, WatchHealthResult
    from tempoconf.rollout.plan import PlannedStage, RolloutPlan
    from tempoconf.rollout.progress import RolloutState

__all__ = ["hold", "publish"]


async def publish(run: RolloutRun, plan: RolloutPlan, stage: PlannedStage) -> None:
    info = workflow.info()
    run.state.enter_stage(stage)
    transition(
        run,
        RolloutState.PUBLISHING,
        SYSTEM_ACTOR,
        f"publishing stage {stage.index + 1}/{len(plan.stages)} {stage.name} ({stage.cohort()})",
    )
    # The audit log says "publishing" before the publish activity writes "stage.published".
    await audit_transitions(run)
    result = await _activities.publish_stage(
        PublishStageInput(
            plan=plan, stage=stage, workflow_id=info.workflow_id, run_id=run.lock_run_id
        ),
        summary=f"publish stage {stage.index + 1}/{len(plan.stages)} {stage.name} ({stage.cohort()})",
    )
    run.state.stage_published(
        stage,
        published_at=result.published_at,
        expires_at=result.expires_at,
        now=run.clock(),
    )
    notify(run, "stage_published", f"stage {stage.name} reaches {stage.cohort()}")


async def hold(run: RolloutRun, plan: RolloutPlan, stage: PlannedStage, *, resumed: bool) -> None:
    """Hold the stage for its cooldown: a durable timer. Checks with an `interval` run beside it
    in one activity (`watch_stage_health`), which returns only when one trips its
    `failure_limit` (the rollout reverts at once) and is cancelled when the hold ends."""
    progress = run.progress
    if resumed and progress.hold_deadline is not None:
        # A run continued as new in the middle of the hold: the same hold, the same deadline.
        deadline = datetime.fromisoformat(progress.hold_deadline)
    else:
        deadline = run.clock() + timedelta(seconds=stage.cooldown_seconds)
        run.state.start_hold(stage, deadline=deadline)
        transition(
            run,
            RolloutState.HOLDING,
            SYSTEM_ACTOR,
            f"holding {stage.name} for {stage.cooldown_seconds:g}s",
        )
    watch = _start_health_watch(run, plan, stage, deadline)

    def hold_cut_short() -> bool:
        return run.state.advance_requested or run.state.bypass is not None

    summary = f"hold {stage.name} ({stage.cooldown_seconds:g}s cooldown)"
    try:
        while True:
            running = watch

            def hold_over(running: asyncio.Task[WatchHealthResult] | None = running) -> bool:
                return hold_cut_short() or (running is not None and running.done())

            await wait_until(run, hold_over, deadline=deadline, summary=summary)
            if watch is None or not watch.done():
                break
            # A check tripped (this raises), or the watch's time was up a moment before the
            # timer fired: wait on for the timer.
            finished, watch = watch, None
            _health_watch_ended(run, stage, finished)
    finally:
        if watch is not None and not watch.done():
            # TRY_CANCEL: the rollout moves on (a halt reverts) at once, without waiting for
            # the watch to hear of the cancellation at its next heartbeat (up to 8 s). The
            # checks only read, so an attempt that runs on a moment changes nothing.
            watch.add_done_callback(ignore_outcome)
            watch.cancel()
        run.state.health_watch_since = None
    progress.hold_deadline = None
    refresh_view(run)


def _start_health_watch(
    run: RolloutRun, plan: RolloutPlan, stage: PlannedStage, deadline: datetime
) -> asyncio.Task[WatchHealthResult] | None:
    """Start the activity that runs the hold's interval checks, if the stage has any."""
    now = run.clock()
    if not any(check.interval_seconds for check in stage.health) or now >= deadline:
        return None
    hold_seconds = (deadline - now).total_seconds()
    watch = _activities.watch_health(
        WatchHealthInput(
            plan=plan,
            stage=stage,
            hold_seconds=hold_seconds,
            offset_seconds=max(stage.cooldown_seconds - hold_seconds, 0.0),
            published_at=run.progress.stages[stage.index].published_at,
            failures=dict(run.state.failures),
        ),
        # It ends by itself when the hold's time is up; the slowest round may run past that.
        start_to_close_timeout=timedelta(
            seconds=hold_seconds + stage.seconds_per_check_run(list(range(len(stage.health))))
        )
        + _activities.STORE_WRITE_TIMEOUT,
        summary=f"interval health checks of {stage.name} during its hold",
    )
    run.state.health_watch_since = now.isoformat()
    refresh_view(run)
    return watch


def _health_watch_ended(
    run: RolloutRun, stage: PlannedStage, watch: asyncio.Task[WatchHealthResult]
) -> None:
    """The watch returned: a check tripped (revert), or the hold's time is up (carry its
    failures in a row into the end-of-hold check)."""
    run.state.health_watch_since = None
    try:
        result = watch.result()
    except ActivityError as error:
        if isinstance(error.cause, CancelledError):
            raise
        # Retried for as long as the hold lasts, so this is a timeout: the hold's end judges.
        note(run, SYSTEM_ACTOR, f"interval health checks stopped: {error.cause or error}")
        return
    run.state.failures.update(result.failures)
    if result.report is not None:
        run.progress.last_health = result.report
    refresh_view(run)
    if result.tripped:
        raise unhealthy(stage, result.tripped)
