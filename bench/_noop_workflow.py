"""The floor of `bench_rollouts.py`: a workflow that does nothing but run as many no-op
activities and 1 s timers as a rollout does, so what it costs is Temporal's share alone.

Its own module (not the benchmark script): the workflow sandbox re-imports a workflow's module,
and a script run as `__main__` cannot be re-imported by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow

NOOP_ACTIVITY = "bench_noop"
NOOP_WORKFLOW = "BenchNoOp"


@dataclass
class NoOpInput:
    activities: int
    timers: int
    timer_seconds: float


@activity.defn(name=NOOP_ACTIVITY)
async def noop_activity() -> None:
    """Nothing: the activity's round trip through Temporal is the whole cost."""


@workflow.defn(name=NOOP_WORKFLOW)
class NoOpWorkflow:
    @workflow.run
    async def run(self, given: NoOpInput) -> int:
        # Timers spread evenly among the activities, one after another, as a rollout's holds
        # come between its publishes and checks.
        timers_after = {
            round((n + 1) * given.activities / (given.timers + 1)) for n in range(given.timers)
        }
        timers_left = given.timers
        for n in range(given.activities):
            await workflow.execute_activity(
                NOOP_ACTIVITY, start_to_close_timeout=timedelta(seconds=30)
            )
            while n + 1 in timers_after and timers_left > 0:
                timers_after.discard(n + 1)
                timers_left -= 1
                await workflow.sleep(given.timer_seconds)
        for _ in range(timers_left):
            await workflow.sleep(given.timer_seconds)
        return given.activities
