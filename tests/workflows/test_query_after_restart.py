"""A query answered by a worker that does not hold the rollout (restarted, or the run evicted from
its cache) after a hold's timer fired, checked every run, without a server.

Such a worker replays the run's history to answer: every event to now, the timer's firing
included, though the workflow task that follows it has not started. SDK Core (temporalio 1.35.0)
gives that firing the time of the last task that did start, before the hold's deadline. A cached
worker then keeps what the replay decided. Without `RolloutRun.clock` the hold loop saw time left,
armed a second hold timer that no later replay makes, and the rollout failed every later task
with a nondeterminism error (bench/findings/README.md; the live reproduction,
tests/faults/test_query_after_kill.py, caught it in 3 of 14 runs).

Here the Replayer replays exactly what such a query replays: a saved history (scenario
`hold_timers_fire`) cut just after each hold timer's firing. The workflow must end the hold there,
as the real task that followed did: the status says the hold is over and it schedules what that
task scheduled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from tempoconf.cli.worker import worker_options
from tempoconf.temporal.payloads import DATA_CONVERTER
from tempoconf.workflows.rollout import ConfigRollout
from tests.workflows.histories.generate import history_file, workflow_id_of

SCENARIO = "hold_timers_fire"


@dataclass
class Seen:
    """What a replay's workflow did: its instance (to ask its status) and the activities it
    started, in order."""

    instance: ConfigRollout | None = None
    activities: list[str] = field(default_factory=list)


class _Recording(Interceptor):
    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        seen = self.seen

        class Outbound(WorkflowOutboundInterceptor):
            def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
                seen.activities.append(input.activity)
                return super().start_activity(input)

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                seen.instance = workflow.instance()
                return await super().execute_workflow(input)

        return Inbound


async def replay(events: list[dict[str, Any]]) -> Seen:
    """Replay `events` as the worker runs the workflow (outside the sandbox); what it did."""
    seen = Seen()
    history = WorkflowHistory.from_json(workflow_id_of(SCENARIO), json.dumps({"events": events}))
    replayer = Replayer(
        workflows=[ConfigRollout],
        data_converter=DATA_CONVERTER,
        workflow_runner=worker_options()["workflow_runner"],
        interceptors=[_Recording(seen)],
    )
    await replayer.replay_workflow(history)  # raises on nondeterminism
    return seen


def _events() -> tuple[list[dict[str, Any]], list[HistoryEvent]]:
    """The saved history as JSON events (to cut) and as protos (to read)."""
    text = history_file(SCENARIO, 1).read_text(encoding="utf-8")
    return json.loads(text)["events"], list(WorkflowHistory.from_json("", text).events)


def _hold_timer_firings() -> list[int]:
    """Index of each hold timer's TIMER_FIRED event (a timer whose summary names a hold)."""
    _, events = _events()
    summaries = {
        event.event_id: DATA_CONVERTER.payload_converter.from_payload(event.user_metadata.summary)
        for event in events
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    }
    return [
        index
        for index, event in enumerate(events)
        if event.event_type == EventType.EVENT_TYPE_TIMER_FIRED
        and str(summaries[event.timer_fired_event_attributes.started_event_id]).startswith("hold ")
    ]


def _scheduled_by_next_task(events: list[HistoryEvent], fired: int) -> list[str]:
    """The activities the workflow task after event index `fired` scheduled, in order."""
    completed = next(
        event.event_id
        for event in events[fired:]
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.workflow_task_completed_event_id
        == completed
    ]


def test_the_saved_history_has_two_hold_timers_that_fire() -> None:
    assert len(_hold_timer_firings()) == 2


@pytest.mark.parametrize("hold", [0, 1], ids=["paused-and-resumed-hold", "plain-hold"])
async def test_a_query_replayed_after_the_hold_timer_fired_sees_the_hold_over(hold: int) -> None:
    raw, events = _events()
    fired = _hold_timer_firings()[hold]
    # What a query after a restart replays: to the workflow task the firing scheduled, not started.
    (scheduled,) = [
        index
        for index in (fired + 1,)
        if events[index].event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
    ]
    stale = events[: scheduled + 1]
    last_started = max(
        event.event_time.ToDatetime()
        for event in stale
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    )
    assert last_started < events[fired].event_time.ToDatetime()  # the replay's clock lags

    seen = await replay(raw[: scheduled + 1])

    assert seen.instance is not None
    progress = seen.instance.status()
    # The status answered: the hold is over (its deadline cleared), not "holding until" a
    # deadline that has passed.
    assert progress.hold_deadline is None, progress.phase
    assert progress.stage_index == hold
    # And the workflow did what the real task after the firing did, so a cached worker that
    # keeps this state sends the commands a replay from the start expects (not a second timer).
    already = sum(
        event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for event in stale
    )
    expected = _scheduled_by_next_task(events, fired)
    assert expected, "the real task after the firing scheduled no activity"
    assert seen.activities[already:] == expected
