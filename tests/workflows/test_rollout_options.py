"""Rollbacks, strategies and webhooks of ConfigRollout (real server, worker and store)."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from tempoconf.canonical import version_id
from tests.fixtures.services import webhook_receiver
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import (
    NAMESPACE,
    NEW_VALUE,
    STABLE_VALUE,
    example_request,
    make_stable,
    served,
    status,
    unique_path,
    wait_for_state,
)


async def test_rollback_makes_an_earlier_version_stable_through_a_workflow(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    first = await make_stable(rollout_harness, path, STABLE_VALUE)
    second = await make_stable(rollout_harness, path, NEW_VALUE)
    assert served(store, path, "h1") == (second, "stable")

    handle = await rollout_harness.start(
        {
            "path": path,
            "version": first,
            "author": "oncall",
            "message": "roll back: connection storms",
        }
    )
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted" and result["version"] == first
    assert served(store, path, "h1") == (first, "stable")
    assert len(store.list_versions(NAMESPACE, path)) == 2  # no new version: the old one again
    started = [e for e in store.history(NAMESPACE, path) if e.action == "rollout.started"]
    assert started[-1].reason == "roll back: connection storms" and started[-1].actor == "oncall"


async def test_staged_rollback_goes_through_stages(rollout_harness: RolloutHarness) -> None:
    store = rollout_harness.store
    path = unique_path()
    first = await make_stable(rollout_harness, path, STABLE_VALUE)
    second = await make_stable(rollout_harness, path, NEW_VALUE)
    handle = await rollout_harness.start(  # the real clock: the test advances the running hold
        {"path": path, "version": first, "stages": [{"channel": "canary", "cooldown": "1h"}]},
        real_clock=True,
    )
    await wait_for_state(handle, "holding", stage_index=0)
    assert served(store, path, "h", channel="canary") == (first, "channel:canary")
    assert served(store, path, "h") == (second, "stable")
    await handle.execute_update("advance")
    assert (await rollout_result(handle))["version"] == first


async def test_rollback_to_an_unknown_version_is_refused(rollout_harness: RolloutHarness) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start({"path": path, "version": "0123456789abcdef"})
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert isinstance(failure.value.cause, ApplicationError)
    assert "/version: config default/" in failure.value.cause.message
    assert "has no version 0123456789abcdef" in failure.value.cause.message


async def test_strategy_expands_to_stages_visible_in_status(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    request = example_request(
        path, stages=[{"channel": "canary"}], strategy={"linear": {"step": 25, "every": "2h"}}
    )
    handle = await rollout_harness.start(request)
    assert (await rollout_result(handle))["outcome"] == "promoted"
    progress = await status(handle)
    assert [stage["name"] for stage in progress["stages"]] == [
        "channel:canary",
        "25%",
        "50%",
        "75%",
        "100%",
    ]
    assert [stage["cooldown_seconds"] for stage in progress["stages"]] == [
        3600,
        7200,
        7200,
        7200,
        7200,
    ]


async def test_webhooks_are_called_once_per_state_change_and_a_failing_one_changes_nothing(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    with webhook_receiver() as receiver:
        request = example_request(
            path,
            stages=[
                {"channel": "canary", "cooldown": "0s", "manual": True},
                {"percentile": 10, "cooldown": "0s"},
            ],
            webhooks=[f"{receiver.url}/hook", f"{receiver.url}/broken"],
        )
        handle = await rollout_harness.start(request)
        await wait_for_state(handle, "awaiting_approval", stage_index=0)
        await handle.execute_update("approve", {"by": "carol"})
        result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    events = [(body["event"], body["stage"]) for body in receiver.received]
    assert events == [
        ("stage_published", "channel:canary"),
        ("awaiting_approval", "channel:canary"),
        ("stage_published", "10%"),
        ("promoted", "10%"),
    ]
    assert len({body["id"] for body in receiver.received}) == 4
    assert {body["version"] for body in receiver.received} == {version_id(NEW_VALUE)}
    assert all(body["path"] == path for body in receiver.received)


async def test_search_attributes_find_rollouts_waiting_for_approval_and_reverted_ones(
    rollout_harness: RolloutHarness,
) -> None:
    client = rollout_harness.realtime_client
    waiting_path, halted_path = unique_path(), unique_path()
    await make_stable(rollout_harness, waiting_path)
    await make_stable(rollout_harness, halted_path)
    waiting = await rollout_harness.start(
        example_request(
            waiting_path, stages=[{"channel": "canary", "cooldown": "0s", "manual": True}]
        )
    )
    halted = await rollout_harness.start(
        example_request(halted_path), real_clock=True
    )  # halted while it holds
    await wait_for_state(waiting, "awaiting_approval", stage_index=0)
    await wait_for_state(halted, "holding", stage_index=0)
    await halted.execute_update("halt", {"reason": "bad idea"})
    await rollout_result(halted)

    async def ids(query: str) -> set[str]:
        return {execution.id async for execution in client.list_workflows(query)}

    async def found() -> bool:
        awaiting = await ids('TempoconfState="awaiting_approval"')
        done = await ids('TempoconfState="halted"')
        return waiting.id in awaiting and halted.id not in awaiting and halted.id in done

    await eventually(found, what="the visibility store to list both rollouts by state")
    of_halted_path = await ids(f'TempoconfPath="{halted_path}"')
    assert halted.id in of_halted_path and waiting.id not in of_halted_path
    await waiting.execute_update("approve")
    assert (await rollout_result(waiting))["outcome"] == "promoted"
