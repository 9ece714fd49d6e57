"""The production continue-as-new path: the server suggests it (`is_continue_as_new_suggested`)
and the rollout follows, with no bound of the worker's own (`continue_as_new_after_events` 0).

Temporal suggests continuing as new from 4,096 events (`limit.historyCount.suggestContinueAsNew`,
a namespace setting of server 1.32) or 4 MB: a real rollout takes weeks of lease renewals to get
there. A dev server of this module's own lowers the count to SUGGEST_AFTER_EVENTS, so a day's
hold with one-hour leases crosses it several times within seconds of skipped time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tempoconf.store.store import Store
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import SEARCH_ATTRIBUTES, WORKFLOW_TYPE
from tests.fixtures.temporal import PRECISE_TIMER_FLAGS, TIME_SKIPPING_FLAGS, rollout_result
from tests.workflows.test_bounded_history import activities_named, runs_of
from tests.workflows.test_rollout import NAMESPACE, example_request, unique_path

SUGGEST_AFTER_EVENTS = 60
"""Above a stage's publish (about 40 events from the start), below a day of half-hourly renewals
(about 10 events each): the server suggests continue-as-new in the middle of each hold."""


@pytest_asyncio.fixture(scope="module")
async def suggesting_server() -> AsyncIterator[WorkflowEnvironment]:
    """The tests' dev server (tests/fixtures/temporal.py), suggesting continue-as-new early."""
    env = await WorkflowEnvironment.start_time_skipping_v2(
        dev_server_existing_path=str(temporal_cli_path()),
        search_attributes=list(SEARCH_ATTRIBUTES),
        dev_server_extra_args=[
            *TIME_SKIPPING_FLAGS,
            *PRECISE_TIMER_FLAGS,
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={SUGGEST_AFTER_EVENTS}",
            "--log-level",
            "error",
        ],
    )
    try:
        yield env
    finally:
        await env.shutdown()


def carried_state(continued: Any) -> dict[str, Any]:
    """The run state a ContinueAsNew event hands to the next run (its second input)."""
    attributes = continued.workflow_execution_continued_as_new_event_attributes
    _request, state = attributes.input.payloads
    return dict(json.loads(state.data))


def last_task_started(events: list[Any]) -> Any:
    return [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED][-1]


async def test_a_rollout_continues_as_new_when_the_server_suggests_it_and_ends_promoted(
    suggesting_server: WorkflowEnvironment, tmp_path: Path
) -> None:
    from tempoconf.cli.worker import build_worker

    client: Client = suggesting_server.client
    store = Store(f"sqlite:///{tmp_path / 'tempoconf.db'}", migrate=True)
    task_queue = f"tempoconf-suggested-{uuid.uuid4().hex[:8]}"
    path = unique_path()
    stages = [
        {"channel": "canary", "cooldown": "24h", "expiration": "1h"},
        {"percentile": 50, "cooldown": "24h", "expiration": "1h"},
    ]
    try:
        # No bound of the worker's own: only the server's suggestion can cut a run.
        async with build_worker(
            client, store, task_queue=task_queue, continue_as_new_after_events=0
        ):
            handle = await client.start_workflow(
                WORKFLOW_TYPE,
                example_request(path, stages=stages),
                id=f"rollout-suggested-{uuid.uuid4().hex[:10]}",
                task_queue=task_queue,
            )
            result = await rollout_result(handle)
            chain = await runs_of(handle)
            progress = await handle.query("status", result_type=dict)
    finally:
        store.close()

    assert result["outcome"] == "promoted", result
    assert len(chain) >= 3, [len(events) for events in chain]
    continued_as_new = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert all(events[-1].event_type == continued_as_new for events in chain[:-1])
    assert chain[-1][-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED

    hold_deadlines: dict[int, str] = {}
    for number, events in enumerate(chain[:-1]):
        # Cut because the server said so: the task that decided it started with the suggestion,
        # past the lowered count (and far below any count of the worker's).
        started = last_task_started(events)
        assert started.workflow_task_started_event_attributes.suggest_continue_as_new, number
        assert started.event_id >= SUGGEST_AFTER_EVENTS, (number, started.event_id)
        # Mid-hold: the next run goes on at the same step, stage and state, to the same deadline.
        state = carried_state(events[-1])
        stage_index = state["progress"]["stage_index"]
        assert (state["step"], state["progress"]["state"]) == ("hold", "holding"), (number, state)
        deadline = state["progress"]["hold_deadline"]
        assert hold_deadlines.setdefault(stage_index, deadline) == deadline, (number, state)
        # The next run resumes that hold: it publishes no stage up to this one again.
        later_publishes = [
            json.loads(event.activity_task_scheduled_event_attributes.input.payloads[0].data)
            for event in activities_named(chain[number + 1], "publish_stage")
        ]
        assert all(p["stage"]["index"] > stage_index for p in later_publishes), later_publishes
    assert set(hold_deadlines) == {0, 1}, hold_deadlines  # each day's hold was cut at least once

    # Each stage published once over the whole chain; the status reads as one rollout.
    publishes = [event for events in chain for event in activities_named(events, "publish_stage")]
    assert len(publishes) == len(stages)
    assert progress["state"] == "promoted" and progress["stage_index"] == len(stages) - 1
    assert [t["to_state"] for t in progress["history"] if t["kind"] == "transition"] == [
        "publishing",
        "holding",
        "publishing",
        "holding",
        "promoting",
        "promoted",
    ]
    assert progress["namespace"] == NAMESPACE
