"""Every rollout's audit trail ends with its outcome, entries in the order things happened (issue
12, hole 7): a terminated rollout (ended by the worker's sweep, or by the next rollout's reclaim),
a failed prepare, and the order of a multi-stage rollout's entries through a halt and a revert."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from tempoconf.activities.abandoned import sweep_abandoned, sweep_once
from tempoconf.canonical import version_id
from tempoconf.store.records import AuditEntry
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import (
    NAMESPACE,
    NEW_VALUE,
    example_request,
    make_stable,
    status,
    unique_path,
    wait_for_state,
)

OUTCOMES = {
    "rollout.promoted",
    "rollout.bypassed",
    "rollout.reverted",
    "rollout.halted",
    "rollout.cancelled",
    "rollout.failed",
    "rollout.terminated",
    "rollout.timed_out",
}
SWEEP_INTERVAL = 0.2


def trail(store: Store, path: str, workflow_id: str) -> list[AuditEntry]:
    return [entry for entry in store.history(NAMESPACE, path) if entry.workflow_id == workflow_id]


def assert_ends_with_one_outcome(entries: list[AuditEntry], outcome: str) -> None:
    actions = [entry.action for entry in entries]
    assert actions[-1] == outcome, actions
    assert [action for action in actions if action in OUTCOMES] == [outcome], actions


def assert_in_the_order_it_happened(entries: list[AuditEntry]) -> None:
    """Ids (the log's order) and times agree; the workflow's own times of its transitions too."""
    assert [entry.id for entry in entries] == sorted(entry.id for entry in entries)
    assert [entry.at for entry in entries] == sorted(entry.at for entry in entries)
    moments = [entry.details["at"] for entry in entries if "at" in entry.details]
    assert moments == sorted(moments), moments


@contextlib.asynccontextmanager
async def sweeping(harness: RolloutHarness) -> AsyncIterator[None]:
    """The worker's sweep (run_worker runs it beside the worker), on a short interval."""
    task = asyncio.create_task(
        sweep_abandoned(harness.realtime_client, harness.store, interval=SWEEP_INTERVAL)
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- (a) terminated -----------------------------------------------------------------------------


async def test_a_terminated_rollout_gets_its_final_entry_and_frees_its_lock_within_the_sweep(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(example_request(path), real_clock=True)
    await wait_for_state(handle, "holding", stage_index=0)

    async with sweeping(rollout_harness):
        started = time.monotonic()
        await handle.terminate(reason="operator pulled the plug")

        def released() -> bool:
            return store.get_lock(NAMESPACE, path) is None

        await eventually(released, what="the sweep to release the terminated rollout's lock")
        took = time.monotonic() - started
    # The figure, not a bound: the sweep (every SWEEP_INTERVAL) is what releases it, or the wait
    # above fails; a loaded machine may take longer than an interval or two.
    print(f"\nterminated rollout: final entry and lock released {took:.2f}s after the terminate")

    entries = trail(store, path, handle.id)
    assert_ends_with_one_outcome(entries, "rollout.terminated")
    assert_in_the_order_it_happened(entries)
    final = entries[-1]
    assert final.reason == "workflow terminated: operator pulled the plug"
    assert final.actor  # the identity Temporal recorded for the terminate (this test's client)
    assert final.details["run_id"] == handle.first_execution_run_id
    # Its stages lapse at their expires_at, as documented; its row says how it ended.
    rollout = store.get_rollout(NAMESPACE, path)
    assert rollout is not None and rollout.state == "terminated"

    # Idempotent: another sweep (another worker's) writes nothing more.
    assert await sweep_once(rollout_harness.realtime_client, store) == 0
    assert trail(store, path, handle.id) == entries
    # The next rollout takes the free lock: nothing to reclaim.
    following = await rollout_harness.start(example_request(path, stages=[]))
    assert (await rollout_result(following))["outcome"] == "promoted"
    actions = [entry.action for entry in store.history(NAMESPACE, path)]
    assert "lock.reclaimed" not in actions


async def test_a_timed_out_rollout_is_ended_as_timed_out(rollout_harness: RolloutHarness) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.realtime_client.start_workflow(
        WORKFLOW_TYPE,
        example_request(path),
        id=f"rollout-test-{uuid.uuid4().hex[:10]}",
        task_queue=rollout_harness.task_queue,
        execution_timeout=timedelta(seconds=3),  # it holds for an hour: Temporal times it out
    )
    await wait_for_state(handle, "holding", stage_index=0)

    async with sweeping(rollout_harness):

        def released() -> bool:
            return store.get_lock(NAMESPACE, path) is None

        await eventually(released, what="the sweep to end the timed-out rollout", timeout=30)

    entries = trail(store, path, handle.id)
    assert_ends_with_one_outcome(entries, "rollout.timed_out")
    assert entries[-1].actor == "temporal"
    assert "timed out" in entries[-1].reason


async def test_a_rollout_that_ended_itself_is_left_alone_by_the_sweep(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    handle = await rollout_harness.start(example_request(path), real_clock=True)
    await wait_for_state(handle, "holding", stage_index=0)
    # Running: its lock is its own.
    assert await sweep_once(rollout_harness.realtime_client, store) == 0
    assert store.get_lock(NAMESPACE, path) is not None

    await handle.execute_update("halt", {"reason": "enough"})
    assert (await rollout_result(handle))["outcome"] == "halted"
    assert await sweep_once(rollout_harness.realtime_client, store) == 0
    assert_ends_with_one_outcome(trail(store, path, handle.id), "rollout.halted")


async def test_a_terminated_rollout_not_yet_swept_is_ended_by_the_next_rollouts_reclaim(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    first = await rollout_harness.start(example_request(path), real_clock=True)
    await wait_for_state(first, "holding", stage_index=0)
    await first.terminate(reason="abandoned")

    # No sweep runs here: the next rollout finds the lock held by an ended run.
    second = await rollout_harness.start(example_request(path, stages=[]))
    assert (await rollout_result(second))["outcome"] == "promoted"

    assert_ends_with_one_outcome(trail(store, path, first.id), "rollout.terminated")
    actions = [entry.action for entry in store.history(NAMESPACE, path)]
    # The first one's end, then the reclaim and the second one's start.
    assert actions.index("rollout.terminated") < actions.index("lock.reclaimed")
    assert actions.index("lock.reclaimed") < len(actions) - 1 - actions[::-1].index(
        "rollout.started"
    )


# -- (b) a failed prepare -----------------------------------------------------------------------


def refuse_inserts_into(database: Path, table: str, message: str) -> None:
    """A real store failure: SQLite aborts every insert into `table`."""
    with contextlib.closing(sqlite3.connect(database)) as connection:
        connection.execute(
            f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
        )
        connection.commit()


@pytest.mark.parametrize(
    ("table", "lock_taken"),
    [("config_lock", False), ("rollout", True)],
    ids=["fails-before-the-lock", "fails-holding-the-lock"],
)
async def test_a_failed_prepare_ends_its_trail_with_failed_and_releases_what_it_took(
    rollout_harness: RolloutHarness, tmp_path: Path, table: str, lock_taken: bool
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)
    refuse_inserts_into(tmp_path / "tempoconf.db", table, "the disk is on fire")

    started = time.monotonic()
    handle = await rollout_harness.start(example_request(path))
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    print(f"\nfailed prepare ({table}): ended {time.monotonic() - started:.1f}s after the start")
    assert "the disk is on fire" in str(failure.value.cause)

    entries = trail(store, path, handle.id)
    assert_ends_with_one_outcome(entries, "rollout.failed")
    assert_in_the_order_it_happened(entries)
    assert [e.action for e in entries] == ["rollout.reverting", "rollout.failed"]
    assert entries[-1].reason.startswith("prepare failed: ")
    assert "the disk is on fire" in entries[-1].reason
    assert store.get_lock(NAMESPACE, path) is None
    assert store.get_rollout(NAMESPACE, path) is None
    progress = await status(handle)
    assert progress["state"] == "failed"
    # Written with the release of the lock when prepare had taken it (its version), else alone.
    assert entries[-1].version == (version_id(NEW_VALUE) if lock_taken else None)


# -- (c) the order of a multi-stage rollout's entries -------------------------------------------


async def test_a_multi_stage_trail_says_publishing_before_published_through_a_halt_and_a_revert(
    rollout_harness: RolloutHarness,
) -> None:
    store = rollout_harness.store
    path = unique_path()
    await make_stable(rollout_harness, path)

    # Halted in its second stage (real clock: the test steers it while it holds).
    halted = await rollout_harness.start(example_request(path), real_clock=True)
    await wait_for_state(halted, "holding", stage_index=0)
    await halted.execute_update("pause", {"reason": "look first"})
    await halted.execute_update("resume", {})
    await halted.execute_update("advance", {"reason": "canary fine"})
    await wait_for_state(halted, "holding", stage_index=1)
    await halted.execute_update("halt", {"reason": "10% looks bad"})
    assert (await rollout_result(halted))["outcome"] == "halted"

    # Reverted by its health check at the end of its second stage (no reports: no data, fails).
    check = {"kind": "reports", "max_error_ratio": 0.05, "on_no_data": "fail"}
    reverted = await rollout_harness.start(
        example_request(
            path,
            value={"is_debug": True, "max_connections": 3},
            stages=[{"channel": "canary"}, {"percentile": 10, "health": [check]}],
        )
    )
    assert (await rollout_result(reverted))["outcome"] == "reverted"

    for handle, outcome, stages in ((halted, "halted", 2), (reverted, "reverted", 2)):
        entries = trail(store, path, handle.id)
        actions = [entry.action for entry in entries]
        assert_ends_with_one_outcome(entries, f"rollout.{outcome}")
        assert_in_the_order_it_happened(entries)
        assert actions[0] == "rollout.started"
        # Each stage: `rollout.publishing` (of that stage), then its `stage.published`.
        publishing = [
            (entry.action, entry.details.get("stage") or entry.details.get("name"))
            for entry in entries
            if entry.action in ("rollout.publishing", "stage.published")
        ]
        names = ["channel:canary", "10%"][:stages]
        assert publishing == [
            item
            for name in names
            for item in (("rollout.publishing", name), ("stage.published", name))
        ], publishing
        assert actions[-2:] == ["rollout.reverting", f"rollout.{outcome}"]
        # The log's transitions are the workflow's, in the workflow's order.
        progress = await status(handle)
        transitions = [t["to_state"] for t in progress["history"] if t["kind"] == "transition"]
        logged = [a.removeprefix("rollout.") for a in actions if a.startswith("rollout.")]
        logged = [a for a in logged if a not in ("started", "command")]
        assert logged == transitions, (logged, transitions)
