"""The end-of-hold health checks: every check of the stage must pass (no data: its `on_no_data`
decides); one failing fewer than `failure_limit` times in a row is looked at again; a judged one
still inconclusive extends the hold (`on_inconclusive: extend`) and is looked at again until it
concludes or the extension is over."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._audit import note, refresh_view, transition
from tempoconf.workflows.rollout._run import SYSTEM_ACTOR, ContinueAsNew, RolloutRun, unhealthy
from tempoconf.workflows.rollout._waiting import wait_until

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.activity_io import CheckHealthInput
    from tempoconf.rollout.health_verdicts import INCONCLUSIVE, UNHEALTHY
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
    try:
        await _check_until_concluded(run, plan, stage)
    except ContinueAsNew:
        raise  # the next run goes on with the same extension
    except BaseException:
        run.progress.hold_extended_until = None  # reverted, halted or cancelled: no longer held
        raise
    run.progress.hold_extended_until = None


async def _check_until_concluded(run: RolloutRun, plan: RolloutPlan, stage: PlannedStage) -> None:
    pending = list(range(len(stage.health)))
    passed: dict[int, CheckResult] = {}
    while True:
        report = await _run_checks(run, plan, stage, pending, extension_over=_extension_over(run))
        if run.state.bypass is not None:
            return
        failing = [result.index for result in report.checks if result.verdict == UNHEALTHY]
        inconclusive = [result.index for result in report.checks if result.verdict == INCONCLUSIVE]
        passed.update(
            (result.index, result)
            for result in report.checks
            if result.index not in failing and result.index not in inconclusive
        )
        if not failing and not inconclusive:
            _concluded(run, stage, [passed[index] for index in sorted(passed)])
            return
        if inconclusive and run.progress.hold_extended_until is None:
            _extend_hold(run, stage, report, inconclusive)
        pending = sorted(failing + inconclusive)
        wake = run.clock() + timedelta(
            seconds=min(
                stage.health[index].interval_seconds or DEFAULT_RECHECK_SECONDS for index in pending
            )
        )
        if inconclusive:
            # The last look is at the extension's end, where `after_extension` settles it.
            wake = min(wake, _extended_until(run) or wake)
        await wait_until(
            run,
            lambda: run.state.bypass is not None,
            deadline=wake,
            summary=f"re-check {len(pending)} health check(s) of {stage.name}",
        )
        if run.state.bypass is not None:
            return


def _extended_until(run: RolloutRun) -> datetime | None:
    until = run.progress.hold_extended_until
    return datetime.fromisoformat(until) if until is not None else None


def _extension_over(run: RolloutRun) -> bool:
    until = _extended_until(run)
    return until is not None and run.clock() >= until


def _extend_hold(
    run: RolloutRun, stage: PlannedStage, report: HealthReport, inconclusive: list[int]
) -> None:
    """The hold goes on past its end while a judged check is inconclusive: up to the longest
    `max_extension` among them (recorded, so a run continued as new keeps the same end)."""
    seconds = max(stage.health[index].max_extension_seconds or 0.0 for index in inconclusive)
    until = run.clock() + timedelta(seconds=seconds)
    run.progress.hold_extended_until = until.isoformat()
    why = "; ".join(
        f"{result.name}: {result.summary}"
        for result in report.checks
        if result.index in inconclusive
    )
    note(
        run,
        SYSTEM_ACTOR,
        f"hold of {stage.name} extended by up to {seconds:g}s: {why}",
        details={"verdict": str(INCONCLUSIVE), "extended_until": until.isoformat()},
    )


def _concluded(run: RolloutRun, stage: PlannedStage, results: list[CheckResult]) -> None:
    """A judged check's verdict is evidence: the history (and the audit log) keeps it."""
    judged = [result for result in results if result.figures.get("judge")]
    if judged:
        note(
            run,
            SYSTEM_ACTOR,
            f"health of {stage.name}: "
            + "; ".join(f"{result.name}: {result.summary}" for result in judged),
            details={"verdict": "healthy"},
        )


def _health_check_timeout(stage: PlannedStage, indices: list[int]) -> timedelta:
    """Long enough for the slowest check's every attempt, and the activity's own start."""
    return timedelta(seconds=stage.seconds_per_check_run(indices) + 15.0)


async def _run_checks(
    run: RolloutRun,
    plan: RolloutPlan,
    stage: PlannedStage,
    indices: list[int],
    *,
    extension_over: bool,
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
                extension_over=extension_over,
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
