"""ConfigRollout end to end on a real Temporal server, a real worker and a real SQLite store."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.service import RPCError

from tempoconf.canonical import version_id
from tempoconf.resolution import STABLE, ClientIdentity, resolve
from tempoconf.resolution.bucketing import bucket
from tempoconf.store.store import Store
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.store.helpers import snapshot_of

NAMESPACE = "default"
STABLE_VALUE = {"is_debug": False, "max_connections": 1000}
NEW_VALUE = {"is_debug": False, "max_connections": 2000}
HOUR = "1h"


def unique_path() -> str:
    return f"myproject/server_config_{uuid.uuid4().hex[:8]}"


def client_in_buckets(path: str, low: int, high: int) -> str:
    """A client id whose bucket for `path` lies in [low, high)."""
    for number in itertools.count():
        client_id = f"host-{number:05d}"
        if low <= bucket(path, client_id) < high:
            return client_id
    raise AssertionError("unreachable")


def served(
    store: Store,
    path: str,
    client_id: str,
    *,
    channel: str | None = None,
    labels: dict[str, str] | None = None,
) -> tuple[str, str]:
    """(version, stage) that this client resolves to right now."""
    snapshot = snapshot_of(store, NAMESPACE, path)
    assert snapshot is not None, f"{path} is unknown to the store"
    resolution = resolve(
        snapshot, ClientIdentity(client_id, channel, labels or {}), datetime.now(UTC)
    )
    assert resolution is not None
    return resolution.record.version, resolution.stage


async def status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    return await handle.query("status", result_type=dict)


async def wait_for_state(
    handle: WorkflowHandle[Any, Any],
    state: str,
    *,
    stage_index: int | None = None,
    timeout: float = 15.0,
) -> dict[str, Any]:
    async def reached() -> dict[str, Any]:
        progress = await status(handle)
        assert progress["state"] == state and stage_index in (None, progress["stage_index"]), (
            f"{progress['state']} at stage index {progress['stage_index']}"
        )
        return progress

    at = "" if stage_index is None else f" at stage index {stage_index}"
    return await eventually(reached, what=f"{handle.id} to be {state}{at}", timeout=timeout)


async def make_stable(
    harness: RolloutHarness, path: str, value: dict[str, Any] = STABLE_VALUE
) -> str:
    """A rollout with no stages promotes directly: the way a config gets its first stable version."""
    handle = await harness.start({"path": path, "value": value, "author": "setup"})
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    return result["version"]


def example_request(path: str, **overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "path": path,
        "namespace": NAMESPACE,
        "value": NEW_VALUE,
        "default_cooldown_time": HOUR,
        "default_expiration_time": HOUR,
        "stages": [{"channel": "canary"}, {"percentile": 10}, {"percentile": 50}],
        "author": "alice@example.com",
        "commit": "3f2a9c1",
        "message": "raise max_connections",
    }
    request.update(overrides)
    return request


async def test_three_stages_serve_each_kind_of_client_then_promote(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    new = version_id(NEW_VALUE)
    canary_outside = client_in_buckets(path, 9000, 10000)  # a canary host outside every percentile
    in_10 = client_in_buckets(path, 0, 1000)
    in_50 = client_in_buckets(path, 1000, 5000)
    outside = client_in_buckets(path, 5000, 10000)

    # The real clock: each hour-long hold must last while the test looks at it and advances it.
    handle = await rollout_harness.start(example_request(path), real_clock=True)

    await wait_for_state(handle, "holding", stage_index=0)
    assert served(store, path, canary_outside, channel="canary") == (new, "channel:canary")
    assert served(store, path, in_10) == (stable, STABLE)
    assert served(store, path, outside) == (stable, STABLE)
    await handle.execute_update("advance", {"reason": "canary looks fine", "by": "test"})

    await wait_for_state(handle, "holding", stage_index=1)
    assert served(store, path, canary_outside, channel="canary") == (
        new,
        "channel:canary",
    )  # cumulative
    assert served(store, path, in_10) == (new, "10%")
    assert served(store, path, in_50) == (stable, STABLE)
    await handle.execute_update("advance")

    progress = await wait_for_state(handle, "holding", stage_index=2)
    assert served(store, path, in_10) == (new, "10%")
    assert served(store, path, in_50) == (new, "50%")
    assert served(store, path, outside) == (stable, STABLE)
    assert served(store, path, canary_outside, channel="canary") == (new, "channel:canary")
    assert [stage["status"] for stage in progress["stages"]] == ["passed", "passed", "live"]
    await handle.execute_update("advance")

    result = await rollout_result(handle)
    assert result == {
        "outcome": "promoted",
        "version": new,
        "reason": "every stage passed its hold and checks",
        "stable_version": new,
    }
    for client_id in (canary_outside, in_10, in_50, outside):
        assert served(store, path, client_id) == (new, STABLE)
    assert store.get_rollout(NAMESPACE, path) is None
    assert store.get_lock(NAMESPACE, path) is None
    actions = [entry.action for entry in store.history(NAMESPACE, path)]
    assert actions.count("stage.published") == 3
    assert "rollout.promoted" in actions


async def test_one_hour_holds_finish_in_seconds_and_leases_are_renewed(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    real_start = time.monotonic()
    handle = await rollout_harness.start(example_request(path, default_expiration_time="20m"))
    result = await rollout_result(handle)
    real_elapsed = time.monotonic() - real_start
    assert result["outcome"] == "promoted"

    history = [event async for event in handle.fetch_history_events()]
    progress = await status(handle)
    hold_started = datetime.fromisoformat(progress["history"][0]["at"])
    hold_finished = datetime.fromisoformat(progress["history"][-1]["at"])
    # Three one-hour holds passed on the workflow's clock, in less real time: time was skipped
    # (compared with the workflow's own clock, not a fixed figure a slow machine might pass).
    assert hold_finished - hold_started >= timedelta(hours=3)
    assert real_elapsed < (hold_finished - hold_started).total_seconds()
    renewals = [
        event
        for event in history
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == "renew_leases"
    ]
    # 20 min leases renewed every 10 min over 3 h of holds.
    assert len(renewals) >= 15


async def test_hold_ends_on_its_own_after_the_cooldown(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(
            path,
            stages=[{"channel": "canary", "cooldown": "1s"}, {"percentile": 10, "cooldown": "1s"}],
        )
    )
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    history = (await status(handle))["history"]
    states = [(t["to_state"], datetime.fromisoformat(t["at"])) for t in history]
    ends_of_holds = [
        states[i + 1][1] - at for i, (state, at) in enumerate(states) if state == "holding"
    ]
    assert len(ends_of_holds) == 2
    assert all(held >= timedelta(seconds=1) for held in ends_of_holds), ends_of_holds


async def test_bypass_skips_remaining_stages_and_promotes(rollout_harness: RolloutHarness) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(path), real_clock=True
    )  # bypasses a running hold
    await wait_for_state(handle, "holding", stage_index=0)

    answer = await handle.execute_update(
        "bypass", {"reason": "hotfix for an outage", "by": "oncall"}
    )
    assert answer["state"] == "bypassed" and answer["accepted"] is True
    result = await rollout_result(handle)
    assert result["outcome"] == "bypassed"
    assert "hotfix for an outage" in result["reason"]
    new = version_id(NEW_VALUE)
    assert served(store, path, client_in_buckets(path, 9000, 10000)) == (new, STABLE)
    actions = [entry.action for entry in store.history(NAMESPACE, path)]
    assert actions.count("stage.published") == 1  # stages 2 and 3 were never published
    promoted = [
        entry for entry in store.history(NAMESPACE, path) if entry.action == "rollout.promoted"
    ]
    assert promoted and promoted[-1].actor == "oncall"


async def test_halt_puts_every_client_back_on_stable(rollout_harness: RolloutHarness) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(path), real_clock=True
    )  # halts a running hold
    await wait_for_state(handle, "holding", stage_index=0)
    await handle.execute_update("advance")
    await wait_for_state(handle, "holding", stage_index=1)
    in_10 = client_in_buckets(path, 0, 1000)
    assert served(store, path, in_10)[0] == version_id(NEW_VALUE)

    # The plain signal, as `temporal workflow signal --name halt` sends it.
    await handle.signal("halt", {"reason": "error rate up"})
    result = await rollout_result(handle)
    assert result["outcome"] == "halted"
    assert result["reason"] == "error rate up"
    assert served(store, path, in_10) == (stable, STABLE)
    assert served(store, path, "anyone", channel="canary") == (stable, STABLE)
    assert store.get_lock(NAMESPACE, path) is None
    assert store.get_stable(NAMESPACE, path).version == stable
    halted = [entry for entry in store.history(NAMESPACE, path) if entry.action == "rollout.halted"]
    assert halted and halted[-1].reason == "error rate up"


async def test_pause_blocks_advancing_until_resume(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    # The real clock: skipped time would end the 1 s hold before the pause arrives.
    handle = await rollout_harness.start(
        example_request(
            path,
            stages=[{"channel": "canary", "cooldown": "1s"}, {"percentile": 10, "cooldown": "1s"}],
        ),
        real_clock=True,
    )
    await wait_for_state(handle, "holding", stage_index=0)
    answer = await handle.execute_update(
        "pause", {"reason": "investigating a dashboard", "by": "bob"}
    )
    assert answer["paused"] is True
    assert answer["phase"] == "Paused at channel:canary: investigating a dashboard"

    # Once the 1 s hold is over (its deadline cleared), the rollout still sits on stage 1.
    async def hold_over() -> dict[str, Any]:
        progress = await status(handle)
        assert progress["hold_deadline"] is None, progress["phase"]
        return progress

    progress = await eventually(hold_over, what="the paused stage's 1 s hold to end")
    assert progress["stage_index"] == 0
    assert progress["paused"] is True
    assert progress["state"] == "holding"

    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("approve")
    assert "nothing is waiting for approval" in str(rejected.value.cause)

    answer = await handle.execute_update("resume", {"reason": "dashboard ok"})
    assert answer["paused"] is False
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    # A finished workflow takes no more commands: the server says so.
    with pytest.raises(RPCError, match="already completed"):
        await handle.execute_update("resume")


async def test_manual_stage_waits_for_approve(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(
            path,
            stages=[
                {"channel": "canary", "cooldown": "0s", "manual": True},
                {"percentile": 10, "cooldown": "0s"},
            ],
        )
    )
    progress = await wait_for_state(handle, "awaiting_approval", stage_index=0)
    assert "waiting for approval" in progress["phase"].lower()
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("advance")
    assert "no hold is running" in str(rejected.value.cause)

    await handle.execute_update("approve", {"reason": "graphs are flat", "by": "carol"})
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    history = (await status(handle))["history"]
    assert any(t["by"] == "carol" and "approved" in t["reason"] for t in history)
    with pytest.raises(RPCError, match="already completed"):
        await handle.execute_update("halt", {"reason": "too late"})


async def test_cancellation_reverts_then_ends_cancelled(rollout_harness: RolloutHarness) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(path), real_clock=True
    )  # cancels a running hold
    await wait_for_state(handle, "holding", stage_index=0)
    assert served(store, path, "h", channel="canary")[0] == version_id(NEW_VALUE)

    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, CancelledError)
    assert served(store, path, "h", channel="canary") == (stable, STABLE)
    assert store.get_lock(NAMESPACE, path) is None
    assert any(entry.action == "rollout.cancelled" for entry in store.history(NAMESPACE, path))


async def test_leases_stay_live_through_a_hold_longer_than_the_expiration(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    new = version_id(NEW_VALUE)
    # The real clock: the store judges leases by the wall clock, so the hold must take real time.
    handle = await rollout_harness.start(
        example_request(
            path, stages=[{"channel": "canary", "cooldown": "11s", "expiration": "5s"}]
        ),
        real_clock=True,
    )
    await wait_for_state(handle, "holding", stage_index=0)
    first_seen = time.monotonic()
    observed = []
    while (await status(handle))["state"] == "holding":
        observed.append(served(store, path, "c1", channel="canary"))
        await asyncio.sleep(0.1)  # not a wait for anything: how often the watch samples the store
    watched = time.monotonic() - first_seen
    # A 5 s lease renewed every 2.5 s stays live through an 11 s hold, which without renewal
    # would lapse after 5 s. What counts
    # is that the watch outlasted the lease, not how many reads a loaded machine managed.
    assert watched > 8, watched
    assert all(version == new for version, _ in observed), observed
    assert (await rollout_result(handle))["outcome"] == "promoted"


async def test_terminated_rollout_lapses_within_one_expiration(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(path, stages=[{"channel": "canary", "expiration": "1s"}]), real_clock=True
    )
    await wait_for_state(handle, "holding", stage_index=0)
    await handle.terminate("operator pulled the plug")
    # The behaviour under test is the lease lapsing on the wall clock with no one to end it:
    # nothing to wait for but time itself (1 s lease, renewed last at most 0.5 s before).
    await asyncio.sleep(1.5)
    assert served(store, path, "c1", channel="canary") == (stable, STABLE)


async def test_second_rollout_of_a_config_is_refused_naming_the_running_one(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    first = await rollout_harness.start(  # the real clock: it must still hold when the second starts
        example_request(path), workflow_id=f"first-{uuid.uuid4().hex[:6]}", real_clock=True
    )
    await wait_for_state(first, "holding", stage_index=0)

    second = await rollout_harness.start(
        example_request(path, value={"is_debug": True, "max_connections": 1})
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await second.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "RolloutAlreadyRunning"
    assert first.id in cause.message

    # A lock whose holder no longer runs is reclaimed by the next rollout.
    await first.terminate("abandoned")
    third = await rollout_harness.start(example_request(path, stages=[]))
    assert (await rollout_result(third))["outcome"] == "promoted"
    assert any(
        entry.action == "lock.reclaimed" for entry in rollout_harness.store.history(NAMESPACE, path)
    )


BAD_REQUESTS = {
    "schema violation": (
        {"value": {"is_debug": "yes", "max_connections": -5}},
        ["/value/is_debug", "/value/max_connections"],
    ),
    "percentile out of range": ({"stages": [{"percentile": 101}]}, ["/stages/0/percentile"]),
    "stage without target": ({"stages": [{"cooldown": "5s"}]}, ["/stages/0"]),
    "unknown field": (
        {"stages": [{"channel": "canary", "cooldwon": "5s"}], "autor": "x"},
        ["/stages/0/cooldwon", "/autor"],
    ),
    "duration that does not parse": (
        {"default_cooldown_time": "five minutes"},
        ["/default_cooldown_time"],
    ),
    "path with ..": ({"path": "myproject/../etc"}, ["/path"]),
    # The store could not keep them (PostgreSQL): refused whatever the backend, not retried.
    "NUL in the text": (
        {"message": "x\x00y", "commit": "\x00", "stages": [{"channel": "can\x00ary"}]},
        ["/message", "/commit", "/stages/0/channel"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
async def test_bad_input_fails_at_once_and_publishes_nothing(
    rollout_harness: RolloutHarness, case: str
) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    store.set_schema(
        NAMESPACE,
        path,
        {
            "type": "object",
            "properties": {
                "is_debug": {"type": "boolean"},
                "max_connections": {"type": "integer", "minimum": 1},
            },
            "required": ["is_debug", "max_connections"],
        },
        actor="test",
    )
    overrides, pointers = BAD_REQUESTS[case]
    versions_before = store.list_versions(NAMESPACE, path)
    handle = await rollout_harness.start({**example_request(path), **overrides})
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidRolloutRequest"
    assert cause.non_retryable
    for pointer in pointers:
        assert pointer in cause.message
    assert {problem["pointer"] for problem in cause.details[0]} >= set(pointers)
    # Nothing published, nothing stored, nothing locked, stable untouched.
    assert store.get_stable(NAMESPACE, path).version == stable
    assert store.get_rollout(NAMESPACE, path) is None
    assert store.get_lock(NAMESPACE, path) is None
    assert store.list_versions(NAMESPACE, path) == versions_before
    snapshot = snapshot_of(store, NAMESPACE, path)
    assert snapshot is not None and snapshot.stages == ()
    # A single attempt: no retries of a request that cannot succeed.
    history = [event async for event in handle.fetch_history_events()]
    started = [e for e in history if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
    assert started[0].activity_task_started_event_attributes.attempt == 1


async def test_non_object_input_fails_cleanly(rollout_harness: RolloutHarness) -> None:
    handle = await rollout_harness.start(["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert "JSON object" in str(failure.value.cause)


async def test_status_and_search_attributes_show_progress(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(path), real_clock=True
    )  # seen while it holds
    progress = await wait_for_state(handle, "holding", stage_index=0)
    assert progress["version"] == version_id(NEW_VALUE)
    assert progress["stage_name"] == "channel:canary"
    assert progress["stage_count"] == 3
    assert progress["hold_deadline"] is not None
    assert progress["stages"][0]["cohort"] == "channel=canary"
    assert [t["to_state"] for t in progress["history"]] == ["publishing", "holding"]

    async def listed() -> list[str]:
        query = f'TempoconfPath="{path}" AND TempoconfState="holding" AND TempoconfStage="channel:canary"'
        return [wf.id async for wf in rollout_harness.realtime_client.list_workflows(query)]

    assert handle.id in await eventually(
        listed, what="the visibility store to list the holding rollout"
    )
    description = await handle.describe()
    assert description.search_attributes["TempoconfVersion"] == [version_id(NEW_VALUE)]
    await handle.execute_update("halt", {"reason": "done with the test"})
    assert (await rollout_result(handle))["outcome"] == "halted"
