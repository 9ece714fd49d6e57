"""What every part of the rollout works on: `RolloutRun`, the run state continue-as-new carries
(`RolloutRunState`) and what lives and dies with one run of the workflow, plus the internal
exceptions that leave the stage loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tempoconf.rollout.plan import PlannedStage
    from tempoconf.rollout.progress import Outcome, RolloutProgress
    from tempoconf.rollout.run_state import RolloutRunState

__all__ = [
    "GOES_ON",
    "SYSTEM_ACTOR",
    "ContinueAsNew",
    "RolloutRun",
    "StopRollout",
    "finish_despite_cancellation",
    "ignore_outcome",
    "unhealthy",
]

SYSTEM_ACTOR = "workflow"


class ContinueAsNew(Exception):
    """Internal: this run's history is long enough; go on as a new run with the same state."""


# What ends a step's span without failing it: the run goes on as a new one, which opens it again.
GOES_ON = (ContinueAsNew,)


class StopRollout(Exception):
    """Internal: leave the stage loop and revert (halt or unhealthy)."""

    def __init__(self, outcome: Outcome, reason: str, by: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.by = by


def unhealthy(stage: PlannedStage, tripped: list[str]) -> StopRollout:
    """Revert: checks of `stage` failed their `failure_limit` times in a row."""
    return StopRollout(
        Outcome.REVERTED,
        f"stage {stage.name} is unhealthy: " + "; ".join(tripped),
        SYSTEM_ACTOR,
    )


class RolloutRun:
    """The whole run state in one object (continue-as-new carries it), and beside it only what
    lives and dies with this run's code: deliveries in flight, the current wait."""

    def __init__(self, state: RolloutRunState) -> None:
        self.state = state
        self.notifications: list[asyncio.Future[Any]] = []
        # What the main loop waits for while it is parked in wait_until (None while it runs or
        # awaits an activity): an update answers once the rollout waits for something it did not give.
        self.parked_on: Callable[[], bool] | None = None
        # True while it waits to continue as new between two stages: parked, but not on anything
        # a command waits for (the next stage is published by the next run).
        self.between_stages = False
        # The latest moment a timer of this run is known to have fired at: see clock.
        self.timers_fired_by: datetime | None = None
        # A freeze ended since the rollout last asked whether it is frozen: a frozen wait ends.
        self.freeze_ended = False

    @property
    def progress(self) -> RolloutProgress:
        return self.state.progress

    @property
    def lock_run_id(self) -> str:
        """The run id the rollout holds its config's lock (and keys its store writes) under: its
        first run's, for every run continue-as-new starts after it."""
        return workflow.info().first_execution_run_id

    def raise_if_halted(self) -> None:
        if self.state.halt is not None:
            raise StopRollout(
                Outcome.HALTED,
                self.state.halt.reason or "halted by an operator",
                self.state.halt.by or "operator",
            )

    def now_iso(self) -> str:
        return self.clock().isoformat()

    def clock(self) -> datetime:
        """workflow.now(), never earlier than a deadline whose timer has fired.

        In a correct run the two agree (a task that sees a timer fire starts after it fired). SDK
        Core (temporalio 1.35.0) can replay a fired timer for a query at the time of an older task,
        and a worker with a workflow cache keeps what that replay decided: a wait that read the
        clock would see its deadline not yet reached and arm a second timer no later replay makes,
        a nondeterminism error that wedges the rollout (bench/findings/README.md). A fired timer
        means its deadline is reached, whatever the clock of that activation says."""
        now = workflow.now()
        fired = self.timers_fired_by
        return now if fired is None or fired <= now else fired

    def timer_fired(self, deadline: datetime | None) -> None:
        if deadline is not None and (
            self.timers_fired_by is None or deadline > self.timers_fired_by
        ):
            self.timers_fired_by = deadline


async def finish_despite_cancellation(step: asyncio.Future[Any]) -> bool:
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


def ignore_outcome(task: asyncio.Task[Any]) -> None:
    """Retrieve an activity's outcome nobody awaits (a cancelled watch, a webhook delivery), so
    asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()
