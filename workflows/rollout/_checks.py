"""The end-of-hold health checks: every check of the stage must pass (no data: its `on_no_data`
decides); one failing fewer than `failure_limit` times in a row is looked at again."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._audit import refresh_view, transition
from tempoconf.workflows.rollout._run import SYSTEM_ACTOR, RolloutRun, unhealthy
from tempoconf.workflows.rollout._waiting import wait_until

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.activity_io import CheckHealthInput
    from tempoconf.rollout.health_verdicts import UNHEALTHY
    from tempoconf.rollout.plan import PlannedStage, RolloutPlan
    from tempoconf.rollout.progress import CheckResult, HealthReport, RolloutState

__all__ = ["check_health"]

DEFAULT_RECHECK_SECONDS = 30.0


async def check_health(
    run: RolloutRun, plan: RolloutPlan, stage: PlannedStage, *, resumed: bool
) -> None:
    """The end-of-hold verdict: every check must pass (no data: its `on_no_data` decides).

    A check that fails fewer than `failure_limit` times in a row is looked at again after its
    interval, so one bad sample does not revert a rollout that asked for tolerance.
    """
    if not stage.health:
        run.progress.last_health = HealthReport(
            healthy=True,
            summary="no health checks configured",
            checked_at=run.now_iso(),
            stage=stage.name,
        )
        return
    if not resumed:
        transition(
            run, RolloutState.CHECKING_HEALTH, SYSTEM_ACTOR, f"checking the health of {stage.name}"
        )
    pending = list(range(len(stage.health)))
    while True:
        report = await _run_checks(run, plan, stage, pending)
        if run.state.bypass is not None:
            return
        pending = [result.index for result in report.checks if result.verdict == UNHEALTHY]
        if not pending:
            return
        recheck = min(
            stage.health[index].interval_seconds or DEFAULT_RECHECK_SECONDS for index in pending
        )
        await wait_until(
            run,
            lambda: run.state.bypass is not None,
            deadline=run.clock() + timedelta(seconds=recheck),
            summary=f"re-check {len(pending)} failing health check(s) of {stage.name}",
        )
        if run.state.bypass is not None:
            return


def _health_check_timeout(stage: PlannedStage, indices: list[int]) -> timedelta:
    """Long enough for the slowest check's every attempt, and the activity's own start."""
    return timedelta(seconds=stage.seconds_per_check_run(indices) + 15.0)


async def _run_checks(
    run: RolloutRun, plan: RolloutPlan, stage: PlannedStage, indices: list[int]
) -> HealthReport:
    """Run some of the stage's checks; revert once a check has failed `failure_limit` times in a row."""
    try:
        report = await _activities.check_health(
            CheckHealthInput(
                plan=plan,
                stage=stage,
                final=True,
                check_indices=indices,
                published_at=run.progress.stages[stage.index].published_at,
            ),
            start_to_close_timeout=_health_check_timeout(stage, indices),
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
            checked_at=run.now_iso(),
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
    run.progress.last_health = report
    refresh_view(run)
    run.raise_if_halted()
    if run.state.bypass is not None:
        return report
    tripped = run.state.count_failures(stage, report)
    if tripped:
        raise unhealthy(stage, tripped)
    return report
