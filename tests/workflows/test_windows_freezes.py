"""Change windows and freezes end to end: a real Temporal server (time skipping where the waits
are long), a real worker and a real SQLite store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tempoconf.canonical import version_id
from tempoconf.resolution import STABLE
from tempoconf.temporal.freeze_wakeup import FROZEN_ROLLOUTS_QUERY, tell_frozen_rollouts
from tempoconf.temporal.names import FREEZE_ENDED_SIGNAL
from tests.fixtures.temporal import RolloutHarness, rollout_result, sqlite_harness
from tests.fixtures.waiting import eventually
from tests.workflows.test_current_details import current_details
from tests.workflows.test_rollout import (
    NAMESPACE,
    NEW_VALUE,
    client_in_buckets,
    example_request,
    make_stable,
    served,
    status,
    unique_path,
    wait_for_state,
)

EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
FAST_RECHECK_SECONDS = 0.5


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M")


def window(start: datetime, end: datetime) -> dict[str, Any]:
    """A daily window from `start` to `end` (UTC, minute precision): overnight when it wraps."""
    return {"days": EVERY_DAY, "from": _clock(start), "to": _clock(end), "timezone": "UTC"}


@pytest_asyncio.fixture
async def fast_freeze_harness(
    temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> AsyncIterator[RolloutHarness]:
    """The rollout harness, with a worker whose frozen rollouts look again every half second (the
    default 30 s would make `freeze end` slow to see in a test on the real clock)."""
    async with sqlite_harness(
        temporal_env, realtime_client, tmp_path, freeze_recheck_seconds=FAST_RECHECK_SECONDS
    ) as harness:
        yield harness


async def test_a_closed_window_holds_a_stage_past_its_cooldown_until_it_opens(
    rollout_harness: RolloutHarness,
) -> None:
    path = unique_path()
    await make_stable(rollout_harness, path)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    # Open now (until 20 min from now), closed from then on, open again in 3 h: the canary is
    # published at once, holds 30 min (past the window's end), then the 10 % stage waits.
    opens_again = now + timedelta(hours=3)
    request = example_request(
        path,
        stages=[{"channel": "canary", "cooldown": "30m"}, {"percentile": 10, "cooldown": "1m"}],
        windows=[
            window(now - timedelta(minutes=10), now + timedelta(minutes=20)),
            window(opens_again, opens_again + timedelta(hours=1)),
        ],
    )
    handle = await rollout_harness.start(request)  # time skips: 3 h pass in seconds
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"

    progress = await status(handle)
    history = progress["history"]
    waits = [row for row in history if row["to_state"] == "waiting_for_window"]
    assert len(waits) == 1, [row["to_state"] for row in history]
    wait = waits[0]
    label = f"opens {opens_again.strftime('%a %H:%M')} UTC"
    assert wait["reason"].startswith(f"waiting for the change window, {label} (in ")
    assert wait["reason"].endswith("before stage 2/2 10%")
    assert wait["stage"] == "10%"

    # Workflow times (the stages' `published_at` is the store's wall clock, which does not skip).
    def at(to_state: str, stage: str) -> datetime:
        (row,) = [r for r in history if r["to_state"] == to_state and r["stage"] == stage]
        return datetime.fromisoformat(row["at"])

    hold_started, hold_ended = at("holding", "channel:canary"), datetime.fromisoformat(wait["at"])
    widened = at("publishing", "10%")
    # The canary held its 30 min, then the rollout stayed there until the window opened.
    assert hold_ended - hold_started >= timedelta(minutes=30)
    assert widened >= opens_again
    assert widened - hold_started > timedelta(hours=2)
    # Nothing but the window held it: the 10% stage was published as it opened.
    assert widened - opens_again < timedelta(minutes=1)
    actions = [entry.action for entry in rollout_harness.store.history(NAMESPACE, path)]
    assert "rollout.waiting_for_window" in actions


async def test_status_and_details_say_when_the_window_opens_and_a_halt_ends_the_wait(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    stable = await make_stable(rollout_harness, path)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    opens = now + timedelta(hours=5)
    request = example_request(
        path,
        stages=[{"channel": "canary"}],
        windows=[window(opens, opens + timedelta(hours=1))],
    )
    # The real clock: the rollout must still be waiting while the test looks at it.
    handle = await rollout_harness.start(request, real_clock=True)
    progress = await wait_for_state(handle, "waiting_for_window", stage_index=0)
    label = f"{opens.strftime('%a %H:%M')} UTC"
    assert progress["phase"] == f"Waiting for the change window, opens {label}"
    assert progress["gate_until"] is not None
    assert datetime.fromisoformat(progress["gate_until"]) == opens
    assert progress["stages"][0]["status"] == "pending"  # nothing was published
    assert served(store, path, "anyone", channel="canary") == (stable, STABLE)
    current = await current_details(handle)
    assert f"Waiting for: the change window, opens {label} (in 4h" in current

    await handle.signal("halt", {"reason": "not today", "by": "oncall"})
    result = await rollout_result(handle)
    assert result["outcome"] == "halted"
    assert served(store, path, "anyone", channel="canary") == (stable, STABLE)
    assert store.get_lock(NAMESPACE, path) is None


async def test_a_freeze_stops_widening_lets_a_halt_through_and_its_end_lets_others_go_on(
    fast_freeze_harness: RolloutHarness,
) -> None:
    harness = fast_freeze_harness
    store = harness.store
    held_path, waiting_path = unique_path(), unique_path()
    held_stable = await make_stable(harness, held_path)
    waiting_stable = await make_stable(harness, waiting_path)
    in_10 = client_in_buckets(held_path, 0, 1000)

    running = await harness.start(
        example_request(
            held_path,
            stages=[{"channel": "canary", "cooldown": "2s"}, {"percentile": 10}],
        ),
        real_clock=True,
    )
    await wait_for_state(running, "holding", stage_index=0)
    store.start_freeze(NAMESPACE, reason="holiday season", by="release-manager")

    # The running rollout stays at its canary stage: the 10% stage is never published.
    progress = await wait_for_state(running, "frozen", stage_index=1)
    assert progress["phase"].startswith(
        f"Frozen: namespace {NAMESPACE} frozen by release-manager since "
    )
    assert progress["phase"].endswith(": holiday season, until it is ended")
    assert served(store, held_path, "anyone", channel="canary")[0] == version_id(NEW_VALUE)
    assert served(store, held_path, in_10) == (held_stable, STABLE)

    # A new rollout starts and waits before its first stage.
    waiting = await harness.start(
        example_request(waiting_path, stages=[{"channel": "canary", "cooldown": "1s"}]),
        real_clock=True,
    )
    await wait_for_state(waiting, "frozen", stage_index=0)
    assert served(store, waiting_path, "anyone", channel="canary") == (waiting_stable, STABLE)

    # A halt goes through during the freeze.
    answer = await running.execute_update("halt", {"reason": "abandon it", "by": "oncall"})
    assert answer["state"] == "halted"
    assert served(store, held_path, "anyone", channel="canary") == (held_stable, STABLE)

    # Still frozen after several looks: the waiting rollout has not moved, and wrote one row.
    await eventually(lambda: _checked_at_least(waiting, 3), what="three freeze checks", timeout=15)
    assert (await status(waiting))["state"] == "frozen"
    frozen_rows = [
        entry
        for entry in store.history(NAMESPACE, waiting_path)
        if entry.action == "rollout.frozen"
    ]
    assert len(frozen_rows) == 1

    store.end_freeze(NAMESPACE, by="release-manager", reason="season over")
    result = await rollout_result(waiting)
    assert result["outcome"] == "promoted"


async def test_a_rollout_told_a_freeze_ended_looks_again_at_once_and_goes_on(
    temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> None:
    # Frozen rollouts of this worker look again only every 10 minutes: within the test, only
    # being told can move one.
    async with sqlite_harness(
        temporal_env, realtime_client, tmp_path, freeze_recheck_seconds=600
    ) as harness:
        store = harness.store
        path = unique_path()
        await make_stable(harness, path)
        store.start_freeze(NAMESPACE, reason="holiday season", by="release-manager")
        waiting = await harness.start(
            example_request(path, stages=[{"channel": "canary", "cooldown": "1s"}]),
            real_clock=True,
        )
        await wait_for_state(waiting, "frozen", stage_index=0)

        async def listed_frozen() -> list[str]:
            listed = [
                execution.id
                async for execution in realtime_client.list_workflows(FROZEN_ROLLOUTS_QUERY)
            ]
            assert waiting.id in listed, listed
            return listed

        await eventually(listed_frozen, what="the rollout listed as frozen", timeout=30)
        # Told while still frozen: it looks, finds the freeze, and waits on.
        assert await tell_frozen_rollouts(realtime_client, NAMESPACE) >= 1
        await eventually(lambda: _checked_at_least(waiting, 2), what="a second look", timeout=30)
        assert (await status(waiting))["state"] == "frozen"

        store.end_freeze(NAMESPACE, by="release-manager", reason="season over")
        assert await tell_frozen_rollouts(realtime_client, NAMESPACE) >= 1
        result = await asyncio.wait_for(rollout_result(waiting), 60)
        assert result["outcome"] == "promoted"
        # Three looks before its stage (the first, one per signal), one before the promotion.
        assert await _checked_at_least(waiting, 4) == 4
        signals = [
            event.workflow_execution_signaled_event_attributes
            async for event in waiting.fetch_history_events()
            if event.HasField("workflow_execution_signaled_event_attributes")
        ]
        assert [signal.signal_name for signal in signals] == [FREEZE_ENDED_SIGNAL] * 2


async def _checked_at_least(handle: Any, count: int) -> int:
    checks = 0
    async for event in handle.fetch_history_events():
        attributes = event.activity_task_scheduled_event_attributes
        if attributes.activity_type.name == "check_freeze":
            checks += 1
    assert checks >= count, f"{checks} freeze check(s)"
    return checks


async def test_override_freeze_passes_each_freeze_and_is_audited(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    until = datetime.now(UTC) + timedelta(days=2)
    freeze = store.start_freeze(NAMESPACE, reason="incident 4711", by="sre", until=until)
    request = example_request(
        path,
        stages=[{"channel": "canary", "cooldown": "1m"}, {"percentile": 10, "cooldown": "1m"}],
        override_freeze={"reason": "the fix for incident 4711"},
    )
    handle = await rollout_harness.start(request)
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    overrides = [
        entry
        for entry in store.history(NAMESPACE, path)
        if entry.action == "rollout.freeze_overridden"
    ]
    # Two publishes and the promote each passed the freeze.
    assert [entry.details["step"] for entry in overrides] == [
        "stage 1/2 channel:canary",
        "stage 2/2 10%",
        "promote",
    ]
    assert {entry.actor for entry in overrides} == {"alice@example.com"}
    assert {entry.reason for entry in overrides} == {"the fix for incident 4711"}
    assert {entry.details["freeze"]["id"] for entry in overrides} == {freeze.id}
    states = [row["to_state"] for row in (await status(handle))["history"]]
    assert "frozen" not in states


async def test_a_freeze_with_an_until_ends_by_itself(rollout_harness: RolloutHarness) -> None:
    """The rollout looks again at the freeze's `until` (well before the 30 s recheck) and goes on.
    The real clock: the store judges `until` by it."""
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    store.start_freeze(
        NAMESPACE, reason="deploy freeze", by="sre", until=datetime.now(UTC) + timedelta(seconds=3)
    )
    handle = await rollout_harness.start(
        example_request(path, stages=[{"channel": "canary", "cooldown": "1s"}]), real_clock=True
    )
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    history = (await status(handle))["history"]
    frozen = [row for row in history if row["to_state"] == "frozen"]
    assert len(frozen) == 1
    assert "deploy freeze, until " in frozen[0]["reason"]


async def test_a_rollback_passes_a_freeze_and_the_pass_is_audited(
    rollout_harness: RolloutHarness,
) -> None:
    """`tempoconf rollback` (a request with `version`) is the way back: no freeze holds it."""
    store = rollout_harness.store
    path = unique_path()
    old = await make_stable(rollout_harness, path)
    newer = await rollout_harness.start({"path": path, "value": NEW_VALUE, "author": "setup"})
    assert (await rollout_result(newer))["outcome"] == "promoted"
    store.start_freeze(NAMESPACE, reason="holidays", by="sre")
    rollback = await rollout_harness.start(
        {"path": path, "version": old, "author": "oncall", "message": "back to the old value"}
    )
    result = await rollout_result(rollback)
    assert result["outcome"] == "promoted" and result["stable_version"] == old
    (passed,) = [
        entry
        for entry in store.history(NAMESPACE, path)
        if entry.action == "rollout.freeze_overridden"
    ]
    assert passed.actor == "oncall" and passed.details["step"] == "promote"
    assert passed.reason.startswith("a rollback to a version the config had")
