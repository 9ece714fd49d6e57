"""How the rollout waits: for a condition or a deadline, renewing its live stages' leases on the
way, auditing what commands recorded meanwhile, and going on as a new run (continue-as-new) when
its history is long enough."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._audit import audit_transitions
from tempoconf.workflows.rollout._notify import finish_notifications
from tempoconf.workflows.rollout._run import ContinueAsNew, RolloutRun

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.activity_io import RenewLeasesInput

__all__ = ["continue_as_new_if_due", "wait_until"]


async def wait_until(
    run: RolloutRun,
    done: Callable[[], bool],
    *,
    deadline: datetime | None = None,
    summary: str | None = None,
) -> None:
    """Wait for `done()` or the deadline, renewing leases on the way; a halt raises StopRollout.

    A loop of wait_condition with the remaining time, so signals can end or change the wait
    (samples-python `updatable_timer`).
    """
    while True:
        run.raise_if_halted()
        await audit_transitions(run)
        now = run.clock()
        if done() or (deadline is not None and now >= deadline):
            return
        renewal = run.state.next_lease_renewal()
        if renewal is not None and now >= renewal:
            await _renew_leases(run)
            continue
        wake_at = min(
            (moment for moment in (deadline, renewal) if moment is not None), default=None
        )

        def wakes() -> bool:
            return run.state.halt is not None or done()

        if _continue_as_new_due(run):
            await _continue_as_new(run, wakes, wake_at)
            continue

        run.parked_on = wakes
        try:
            # Also wake to audit what a command recorded meanwhile (a pause during a long hold).
            await workflow.wait_condition(
                lambda: wakes() or run.state.has_unaudited(),
                timeout=None if wake_at is None else wake_at - now,
                timeout_summary=summary,
            )
        except TimeoutError:
            run.timer_fired(wake_at)
        finally:
            run.parked_on = None


def _continue_as_new_due(run: RolloutRun) -> bool:
    """The server suggests it (history a few thousand events long, or large), or the worker's
    own bound (the plan's `continue_as_new_after_events`) is reached."""
    info = workflow.info()
    plan = run.state.plan
    limit = plan.continue_as_new_after_events if plan is not None else 0
    return info.is_continue_as_new_suggested() or (
        limit > 0 and info.get_current_history_length() >= limit
    )


async def continue_as_new_if_due(run: RolloutRun) -> None:
    """Between two stages nothing is in flight: a good place to cut the history."""
    if _continue_as_new_due(run):
        run.between_stages = True
        try:
            await _continue_as_new(run, lambda: run.state.halt is not None, None)
        finally:
            run.between_stages = False


async def _continue_as_new(
    run: RolloutRun, wakes: Callable[[], bool], wake_at: datetime | None
) -> None:
    """Go on as a new run carrying the whole state, once deliveries and handlers in flight have
    finished; returns instead when something the rollout must act on first arrives meanwhile
    (a halt, the end of the wait) or the wait's time is up."""
    await audit_transitions(run)
    await finish_notifications(run)
    run.parked_on = wakes  # an update that waits for the rollout to settle answers now
    try:
        await workflow.wait_condition(
            lambda: wakes() or (workflow.all_handlers_finished() and not run.state.has_unaudited()),
            timeout=None if wake_at is None else max(wake_at - run.clock(), timedelta(0)),
            timeout_summary="let operator commands in flight finish before continue-as-new",
        )
    except TimeoutError:
        run.timer_fired(wake_at)
        return
    finally:
        run.parked_on = None
    if wakes() or run.state.has_unaudited() or not workflow.all_handlers_finished():
        return
    run.notifications.clear()
    run.state.runs += 1
    raise ContinueAsNew()


async def _renew_leases(run: RolloutRun) -> None:
    leases = run.state.leases
    result = await _activities.renew_leases(
        RenewLeasesInput(
            namespace=run.progress.namespace,
            path=run.progress.path,
            run_id=run.lock_run_id,
            expirations=dict(leases),
        ),
        summary=f"renew the leases of {len(leases)} live stage(s)",
    )
    run.state.leases_renewed(result.expires_at, now=run.clock())
