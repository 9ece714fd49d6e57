"""The rollout's webhooks: one delivery per URL of the plan, started and not awaited (a slow hook
never holds a stage), let finish before the run ends or continues as new."""

from __future__ import annotations

import asyncio

from temporalio import workflow

from tempoconf.workflows.rollout import _activities
from tempoconf.workflows.rollout._run import RolloutRun, ignore_outcome

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.activity_io import NotifyInput

__all__ = ["finish_notifications", "notify"]


def notify(run: RolloutRun, event: str, reason: str) -> None:
    """Start one webhook delivery per URL without waiting for it (a slow hook never holds a stage)."""
    plan = run.state.plan
    if plan is None or not plan.webhooks:
        return
    body = run.state.webhook_body(event, reason, run_id=run.lock_run_id, at=run.now_iso())
    for url in plan.webhooks:
        run.state.deliveries_started += 1
        delivery = _activities.notify(
            NotifyInput(url=url, body=body), summary=f"notify {event} to {url}"
        )
        # A failed delivery is read as soon as it ends (the worker logged its attempts):
        # a run that never gathers it (cancelled, or let go by a stopping worker) would
        # otherwise leave asyncio to report it "never retrieved", tracebacks and all.
        delivery.add_done_callback(ignore_outcome)
        run.notifications.append(delivery)


async def finish_notifications(run: RolloutRun) -> None:
    """Let deliveries in flight end before the workflow does; their failures are ignored."""
    if run.notifications:
        await asyncio.gather(*run.notifications, return_exceptions=True)
