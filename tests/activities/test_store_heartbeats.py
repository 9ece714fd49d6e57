"""Store activities heartbeat while they run, under a short heartbeat timeout the workflow gives
them, so a worker lost in the middle of a write is retried on another in seconds rather than at
the 30 s start-to-close timeout (tests/faults/test_worker_kill.py prints the recovery figure)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any, cast

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import ActivityEnvironment
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

from tempoconf.activities import heartbeats
from tempoconf.activities.heartbeats import STORE_ACTIVITIES, StoreHeartbeats
from tempoconf.cli.worker import worker_options
from tempoconf.rollout.activity_io import CHECK_HEALTH_ACTIVITY, PUBLISH_STAGE_ACTIVITY
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.workflows.test_rollout import example_request, unique_path


class _SlowWrite(ActivityInboundInterceptor):
    """The activity itself: a store call that takes `seconds`, then fails or answers."""

    def __init__(self, seconds: float, error: Exception | None = None) -> None:
        self.seconds = seconds
        self.error = error
        self.returned_at = 0.0
        """Loop time at which the write returned (or raised)."""

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        await asyncio.sleep(self.seconds)
        self.returned_at = asyncio.get_running_loop().time()
        if self.error is not None:
            raise self.error
        return "written"


async def _run(
    activity_type: str, heartbeat_timeout: timedelta | None, write: _SlowWrite
) -> tuple[Any, list[float]]:
    """Run `write` through the worker's interceptor as activity `activity_type`; its result
    and the moments (loop time) it heartbeated, including any after it returned."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, activity_type=activity_type, heartbeat_timeout=heartbeat_timeout
    )
    beats: list[float] = []
    env.on_heartbeat = lambda *_: beats.append(asyncio.get_running_loop().time())
    inbound = StoreHeartbeats().intercept_activity(write)

    async def execute() -> Any:
        return await inbound.execute_activity(cast(ExecuteActivityInput, None))

    try:
        result: Any = await env.run(execute)
    except Exception as error:  # returned, so the beats after it are counted too
        result = error
    await asyncio.sleep(0.1)
    return result, beats


@pytest.fixture(autouse=True)
def _beat_often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeats, "STORE_HEARTBEAT_EVERY_SECONDS", 0.02)


async def test_a_slow_store_write_heartbeats_until_it_returns() -> None:
    write = _SlowWrite(0.3)
    result, beats = await _run(PUBLISH_STAGE_ACTIVITY, timedelta(seconds=5), write)
    assert result == "written"
    assert len(beats) >= 3, beats
    # None after the write returned (the 0.1 s _run waits after it would hold about five).
    assert max(beats) <= write.returned_at, (beats, write.returned_at)


async def test_a_store_write_quicker_than_the_interval_sends_no_beat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An interval far above the quick write's, so a loaded machine's thread hand-off cannot
    # outlast it.
    monkeypatch.setattr(heartbeats, "STORE_HEARTBEAT_EVERY_SECONDS", 0.5)
    # Each beat is an RPC Temporal persists: the usual write, done in milliseconds, sends none.
    result, beats = await _run(PUBLISH_STAGE_ACTIVITY, timedelta(seconds=5), _SlowWrite(0.005))
    assert result == "written"
    assert beats == [], beats
    # And a slow one beats first once it has run for the interval.
    started = asyncio.get_running_loop().time()
    result, beats = await _run(PUBLISH_STAGE_ACTIVITY, timedelta(seconds=5), _SlowWrite(0.8))
    assert beats and beats[0] - started >= heartbeats.STORE_HEARTBEAT_EVERY_SECONDS, beats


async def test_a_failed_store_write_stops_heartbeating() -> None:
    write = _SlowWrite(0.2, RuntimeError("disk full"))
    result, beats = await _run(PUBLISH_STAGE_ACTIVITY, timedelta(seconds=5), write)
    assert isinstance(result, RuntimeError), result
    assert beats and max(beats) <= write.returned_at, (beats, write.returned_at)


@pytest.mark.parametrize(
    ("activity_type", "heartbeat_timeout"),
    [
        # Started without a heartbeat timeout (a run of a workflow from before it had one).
        (PUBLISH_STAGE_ACTIVITY, None),
        # The health checks heartbeat their own progress, which a blank beat would overwrite.
        (CHECK_HEALTH_ACTIVITY, timedelta(seconds=10)),
    ],
)
async def test_other_activities_are_left_alone(
    activity_type: str, heartbeat_timeout: timedelta | None
) -> None:
    result, beats = await _run(activity_type, heartbeat_timeout, _SlowWrite(0.2))
    assert result == "written"
    assert beats == []


def test_the_worker_runs_the_interceptor_and_sends_beats_on_within_a_second() -> None:
    options = worker_options()
    assert any(isinstance(each, StoreHeartbeats) for each in options["interceptors"])
    assert options["max_heartbeat_throttle_interval"] <= timedelta(seconds=1)


async def test_the_rollout_gives_every_store_activity_a_heartbeat_timeout(
    rollout_harness: RolloutHarness,
) -> None:
    handle = await rollout_harness.start(example_request(unique_path()))
    assert (await rollout_result(handle))["outcome"] == "promoted"
    timeouts: dict[str, set[float]] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            timeouts.setdefault(attributes.activity_type.name, set()).add(
                attributes.heartbeat_timeout.ToTimedelta().total_seconds()
            )
    store_activities = {
        name: seconds for name, seconds in timeouts.items() if name in STORE_ACTIVITIES
    }
    assert PUBLISH_STAGE_ACTIVITY in store_activities, timeouts
    assert all(seconds == {10.0} for seconds in store_activities.values()), timeouts
