"""Steering tells the truth: an update answers a short result once the command took effect, the
history has one vocabulary (notes are not transitions), one numbering and an actor on every row,
and a revert says what it went back to."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from temporalio.client import WorkflowUpdateFailedError

from tempoconf.canonical import version_id
from tempoconf.rollout.progress import CommandResult
from tests.fixtures.services import http_judge
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.workflows.test_rollout import (
    NAMESPACE,
    NEW_VALUE,
    example_request,
    make_stable,
    status,
    unique_path,
    wait_for_state,
)

COMMAND_RESULT_KEYS = {field.name for field in fields(CommandResult)}


async def test_advance_answers_with_the_next_stage_held_in_a_short_result(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(path), real_clock=True
    )  # advances a running hold
    await wait_for_state(handle, "holding", stage_index=0)

    answer = await handle.execute_update("advance", {"reason": "canary looks fine", "by": "dave"})

    # The state after the command took effect: the second stage published and held, not the
    # first stage's hold that the command ended.
    assert set(answer) == COMMAND_RESULT_KEYS
    assert (answer["command"], answer["accepted"], answer["state"]) == ("advance", True, "holding")
    assert (answer["stage"], answer["stage_number"], answer["stage_count"]) == ("10%", 2, 3)
    assert answer["phase"].startswith("Holding stage 10% until ")
    assert answer["message"] == "the hold of stage 1/3 channel:canary ended early"
    assert len(json.dumps(answer)) < 600  # a short result: the full progress stays the query
    progress = await status(handle)
    assert (progress["state"], progress["stage_index"]) == ("holding", 1)
    await handle.execute_update("halt", {"reason": "end of test"})


async def test_advance_answers_after_the_health_checks_it_started(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    with http_judge() as judge:
        # /slow answers 200 after 3 s: the answer waits for the verdict and the next stage.
        checks = [{"kind": "http", "url": judge + "/slow", "timeout": "10s", "attempts": 1}]
        handle = await rollout_harness.start(
            example_request(path, health=checks), real_clock=True
        )  # advanced
        await wait_for_state(handle, "holding", stage_index=0)
        answer = await handle.execute_update("advance")
        assert (answer["state"], answer["stage_number"]) == ("holding", 2), answer
        assert answer["message"] == "the hold of stage 1/3 channel:canary ended early"
        await handle.execute_update("halt", {"reason": "end of test"})


async def test_advance_says_requested_when_the_rollout_has_not_moved_on_within_the_bound(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    with http_judge() as judge:
        # Six attempts that each time out after 2 s: the checks outlast the 10 s the answer waits.
        checks = [{"kind": "http", "url": judge + "/slow", "timeout": "2s", "attempts": 6}]
        handle = await rollout_harness.start(
            example_request(path, health=checks), real_clock=True
        )  # advanced
        await wait_for_state(handle, "holding", stage_index=0)
        answer = await handle.execute_update("advance")
        assert (answer["accepted"], answer["state"], answer["stage_number"]) == (
            True,
            "checking_health",
            1,
        )
        assert answer["message"] == (
            "requested: the hold of stage 1/3 channel:canary ends early; the rollout moves on once "
            "the current step ends"
        )
        assert answer["phase"] == "Checking the health of stage channel:canary"
        assert (await rollout_result(handle))["outcome"] == "reverted"


async def test_an_approval_while_paused_is_held_until_resume_which_answers_promoted(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(path, stages=[{"channel": "canary", "cooldown": "0s", "manual": True}])
    )
    await wait_for_state(handle, "awaiting_approval", stage_index=0)
    await handle.execute_update("pause", {"reason": "lunch", "by": "bob"})

    approved = await handle.execute_update("approve", {"reason": "graphs are flat", "by": "carol"})

    assert approved["accepted"] is True and approved["state"] == "awaiting_approval"
    assert (
        approved["message"]
        == "approval of channel:canary accepted and held until resume (paused: lunch)"
    )
    assert approved["phase"] == "Paused at channel:canary (approved; it moves on at resume): lunch"
    note = (await status(handle))["history"][-1]
    assert (note["kind"], note["by"]) == ("note", "carol")
    assert (
        note["reason"]
        == "approved channel:canary: graphs are flat; held until resume (paused: lunch)"
    )
    with pytest.raises(WorkflowUpdateFailedError) as again:
        await handle.execute_update("approve")
    assert "already approved; the rollout is paused (lunch) and moves on at resume" in str(
        again.value.cause
    )

    resumed = await handle.execute_update("resume", {"by": "bob"})

    # Not `awaiting_approval` a moment before promotion: the answer comes once it is promoted.
    assert (resumed["state"], resumed["message"], resumed["paused"]) == (
        "promoted",
        "resumed",
        False,
    )
    assert (await rollout_result(handle))["outcome"] == "promoted"


async def test_history_rows_have_one_vocabulary_one_numbering_and_an_actor_each(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    request = example_request(path, stages=[{"channel": "canary"}, {"percentile": 10}])
    del request["author"]  # then who started it is whoever Temporal says started the run
    handle = await rollout_harness.start(
        request, real_clock=True
    )  # steered through its running holds
    await wait_for_state(handle, "holding", stage_index=0)
    # As `temporal workflow signal --name ...` sends them: no "by".
    await handle.signal("pause", {"reason": "look closer"})
    await handle.signal("resume", {})
    await handle.signal("advance", {})
    await wait_for_state(handle, "holding", stage_index=1)
    await handle.signal("bypass", {"reason": "ship it"})
    assert (await rollout_result(handle))["outcome"] == "bypassed"

    history = (await status(handle))["history"]
    assert all(row["by"] for row in history), history
    notes = [row for row in history if row["kind"] == "note"]
    assert [row["reason"] for row in notes] == [
        "pause: look closer", "resume: no reason given", "advance: hold ended early (no reason)",
        "bypass requested: ship it",
    ]  # fmt: skip
    assert all(
        row["from_state"] != row["to_state"] for row in history if row["kind"] == "transition"
    )

    audit = store.history(NAMESPACE, path, limit=1000)
    run = [entry for entry in audit if entry.workflow_id == handle.id]
    assert all(entry.actor for entry in run), [(e.action, e.actor) for e in run]
    started = next(entry for entry in run if entry.action == "rollout.started")
    assert started.actor == rollout_harness.realtime_client.identity  # not "workflow"
    promoted = next(entry for entry in run if entry.action == "rollout.promoted")
    assert promoted.actor == "operator"
    actions = [entry.action for entry in run]
    # "publishing" before the stage's "published", for each stage, numbered from 1 as status does.
    assert actions[: actions.index("rollout.holding") + 1] == [
        "rollout.started", "rollout.publishing", "stage.published", "rollout.holding",
    ]  # fmt: skip
    publishing = [i for i, action in enumerate(actions) if action == "rollout.publishing"]
    published = [i for i, action in enumerate(actions) if action == "stage.published"]
    assert len(publishing) == len(published) == 2
    assert all(before < after for before, after in zip(publishing, published, strict=True))
    assert [entry.reason for entry in run if entry.action == "stage.published"] == [
        "stage 1 'channel:canary' published", "stage 2 '10%' published",
    ]  # fmt: skip
    assert [entry.reason for entry in run if entry.action == "rollout.publishing"] == [
        "publishing stage 1/2 channel:canary (channel=canary)", "publishing stage 2/2 10% (10% of clients)",
    ]  # fmt: skip
    assert actions.count("rollout.command") == 4


async def test_a_rollout_without_stages_is_promoted_with_a_reason_that_says_so(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    handle = await rollout_harness.start({"path": path, "value": NEW_VALUE, "stages": []})
    result = await rollout_result(handle)
    assert result == {
        "outcome": "promoted", "version": version_id(NEW_VALUE), "reason": "no stages: promoted directly",
        "stable_version": version_id(NEW_VALUE),
    }  # fmt: skip


async def test_a_halt_says_what_it_went_back_to(rollout_harness: RolloutHarness) -> None:
    first = unique_path()  # no stable version: clients get 404 before and after
    # The real clock here and below: each rollout is halted during its running hold.
    handle = await rollout_harness.start(
        example_request(first, stages=[{"channel": "canary"}]), real_clock=True
    )
    await wait_for_state(handle, "holding", stage_index=0)
    answer = await handle.execute_update("halt", {"reason": "wrong value", "by": "erin"})

    back_to_nothing = (
        "Halted, back to no version (the config has none stable: clients get 404, as before)"
    )
    assert (answer["state"], answer["message"]) == (
        "halted",
        "halted: the live stages were reverted",
    )
    assert answer["phase"] == f"{back_to_nothing}: wrong value"
    assert "stable" not in answer["phase"].split("(")[0]
    result = await rollout_result(handle)
    assert result["stable_version"] is None
    assert (await status(handle))["phase"] == f"{back_to_nothing}: wrong value"

    second = unique_path()
    stable = await make_stable(rollout_harness, second)
    handle = await rollout_harness.start(
        example_request(second, stages=[{"channel": "canary"}]), real_clock=True
    )
    await wait_for_state(handle, "holding", stage_index=0)
    answer = await handle.execute_update("halt", {"reason": "wrong value"})
    assert answer["phase"] == f"Halted, back to stable {stable}: wrong value"
    assert (await rollout_result(handle))["stable_version"] == stable


async def test_a_nul_in_a_command_is_refused_by_the_update_and_replaced_in_the_signal(
    rollout_harness: RolloutHarness,
) -> None:
    """Text the store cannot keep never reaches the audit log, whose write would fail on
    PostgreSQL: an update says which field is wrong; a signal, which cannot be refused, is
    recorded with the character replaced."""
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(
        example_request(path, stages=[{"channel": "canary"}]), real_clock=True
    )
    await wait_for_state(handle, "holding", stage_index=0)

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("pause", {"reason": "x\x00y"})
    assert "invalid pause reason: contains a NUL character" in str(refused.value.cause)
    assert (await status(handle))["pause_reasons"] == []

    await handle.signal("halt", {"reason": "bad\x00value", "by": "e\x00ve"})
    assert (await rollout_result(handle))["outcome"] == "halted"
    history = rollout_harness.store.history(NAMESPACE, path, limit=50)
    halted = [entry for entry in history if entry.reason == "bad\ufffdvalue"]
    assert halted and halted[0].actor == "e\ufffdve"
