"""A rollout halted before it published anything (waiting for a freeze or a change window before
its first stage) says so: its halt's answer, its phase and its current details say nothing was
published and what every client stays on, not that live stages were reverted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.workflows.test_current_details import current_details
from tests.workflows.test_rollout import (
    NAMESPACE,
    example_request,
    make_stable,
    status,
    unique_path,
    wait_for_state,
)
from tests.workflows.test_windows_freezes import window


async def test_a_halt_during_a_freeze_before_the_first_stage_says_nothing_was_published(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    rollout_harness.store.start_freeze(NAMESPACE, reason="release night", by="release-manager")
    # The real clock: a frozen rollout looks again every 30 s, which time skipping would spin.
    handle = await rollout_harness.start(example_request(path), real_clock=True)
    await wait_for_state(handle, "frozen", stage_index=0)

    answer = await handle.execute_update("halt", {"reason": "not tonight", "by": "erin"})

    phase = (
        f"Halted before anything was published (every client stays on stable {stable}): not tonight"
    )
    assert (answer["state"], answer["message"], answer["phase"]) == (
        "halted",
        f"halted: nothing was published; every client stays on stable {stable}",
        phase,
    )
    assert (await status(handle))["phase"] == phase
    details = await current_details(handle)
    assert f"**{phase}**" in details, details
    assert "reverted" not in details.split("Outcome:")[0], details
    assert (await rollout_result(handle))["outcome"] == "halted"


async def test_a_halt_while_waiting_for_a_window_on_a_config_without_stable_says_so(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()  # no stable version: clients get 404 before and after
    now = datetime.now(UTC)
    closed_now = window(now + timedelta(hours=2), now + timedelta(hours=3))
    handle = await rollout_harness.start(
        example_request(path, windows=[closed_now]), real_clock=True
    )
    await wait_for_state(handle, "waiting_for_window", stage_index=0)

    answer = await handle.execute_update("halt", {"reason": "wrong value"})

    nothing = "the config has no stable version: clients get 404, as before"
    assert answer["message"] == f"halted: nothing was published; {nothing}"
    assert answer["phase"] == f"Halted before anything was published ({nothing}): wrong value"


async def test_a_halt_after_a_publish_still_says_the_live_stages_were_reverted(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(example_request(path), real_clock=True)
    await wait_for_state(handle, "holding", stage_index=0)
    answer = await handle.execute_update("halt", {"reason": "wrong value"})
    assert answer["message"] == "halted: the live stages were reverted"
    assert answer["phase"] == f"Halted, back to stable {stable}: wrong value"
