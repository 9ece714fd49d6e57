"""A rollout queried (as `rollout status`, the Web UI and the Temporal CLI do) while a restarted
worker takes over from a SIGKILLed one, with the hold's timer firing meanwhile: the rollout ends
as it should, and its history replays (no nondeterminism).

With the SDK's sticky cache this wedged rollouts: the query went first to the dead worker's sticky
queue, was answered by the new worker only after that timed out, by which time the hold's timer
had fired; the new worker replayed the timer's firing for the query at the last task's time, kept
that state and armed a second hold timer, and every later replay wanted the hold's end instead.
Found by bench/bench_soak.py. Fixed in the workflow (RolloutRun.clock: a fired timer's
deadline is reached, whatever the clock of the activation says); the worker keeps its cache
(cli/worker.py WORKFLOW_CACHE_SIZE). It depends on timing: without the fix it failed 3 of 14 runs;
tests/workflows/test_query_after_restart.py checks the fix on every run, by replay."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.worker import Replayer

from tempoconf.store.store import Store
from tempoconf.workflows.rollout import ConfigRollout
from tests.faults.rollouts import ROLLOUT_TIMEOUT_SECONDS, assert_ended_cleanly, establish_stable
from tests.faults.stack import Stack, audit, unique_path, wait_until_async
from tests.fixtures.temporal import rollout_result

pytestmark = pytest.mark.faults

HOLD_SECONDS = 8
"""Long enough to kill the worker and start another inside the hold, short enough that the hold's
timer fires while a query waits out a dead worker's sticky queue (10 s)."""


async def test_a_query_while_a_new_worker_takes_over_leaves_the_history_replayable(
    stack: Stack, store: Store, backend: str, figure: Callable[[str], None]
) -> None:
    path = unique_path("query-after-kill")
    worker = stack.start_worker()
    stack.start_api()
    await establish_stable(stack, path)
    request = {
        "path": path,
        "value": {"generation": 2},
        "stages": [{"channel": "canary"}, {"percentile": 100}],
        "default_cooldown_time": f"{HOLD_SECONDS}s",
        "message": "queried while its worker is replaced",
    }
    before = max(entry.id for entry in audit(store, path))
    handle = await stack.start_rollout(request)

    def holding() -> bool:
        return any(e.id > before and e.action == "rollout.holding" for e in audit(store, path))

    await wait_until_async(holding, what="the canary stage's hold", timeout=60, interval=0.05)
    worker.kill()
    stack.start_worker()
    asked = time.monotonic()
    status = await asyncio.wait_for(handle.query("status"), 60)
    answered = time.monotonic() - asked
    result = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)

    history = await handle.fetch_history()
    failed_tasks = [
        event.workflow_task_failed_event_attributes.failure.message
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed_tasks == [], failed_tasks
    # What any worker that picks this rollout up later does: replay it from the start.
    replay = await Replayer(workflows=[ConfigRollout]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert replay.replay_failure is None, replay.replay_failure
    await assert_ended_cleanly(stack, store, path, result, stages=2)
    figure(
        f"query after a worker SIGKILL mid-hold: answered in {answered:.1f}s "
        f"(at stage index {status['stage_index']}), "
        f"{len(history.events)} events, replays cleanly"
    )
