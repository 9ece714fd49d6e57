"""The worker's connection to Temporal cut for a minute (every connection reset, new ones refused,
through a proxy; the worker process, the store and Temporal itself keep running), once in the
middle of a hold and once in the middle of a stage's publish. The rollout resumes when the link
returns and ends promoted, each stage published once, and the canary's lease never lapses. The
recovery figures are printed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from tempoconf.rollout.activity_io import PUBLISH_STAGE_ACTIVITY
from tempoconf.store.store import Store
from tests.faults.leases import LeaseWatch
from tests.faults.rollouts import (
    ROLLOUT_TIMEOUT_SECONDS,
    assert_ended_cleanly,
    establish_stable,
    staged,
)
from tests.faults.stack import (
    Stack,
    StoreStall,
    activity_started,
    audit,
    retried_activities,
    unique_path,
    wait_until_async,
)
from tests.fixtures.temporal import rollout_result

pytestmark = pytest.mark.faults

CUT_SECONDS = 60.0
"""The issue's minute: far beyond the SDK's reconnect backoff and the store activities' 10 s
heartbeat timeout, so the server gives up on what the worker was running."""
LEASE_SECONDS = 90
"""The canary's lease, renewed every 45 s: a renewal falls due during the cut, so the lease lives
only if the worker renews it soon after the link returns (it ends 29 s after)."""
RECOVERY_BOUND_SECONDS = 20.0
"""A bound, not a goal: what is left of the lease after the cut, less a margin."""


@pytest.fixture
def linked(stack: Stack) -> Stack:
    """The stack whose worker reaches Temporal through `stack.worker_temporal`."""
    stack.worker_temporal = stack.temporal_proxy()
    return stack


def _request(path: str, *, canary_hold: str) -> dict[str, Any]:
    request = staged(path, health=[])  # a check's own reaction to the cut is another story
    request["stages"][0].update(cooldown=canary_hold, expiration=f"{LEASE_SECONDS}s")
    request["stages"][1]["cooldown"] = "3s"
    return request


def _entry_at(store: Store, path: str, after: int, action: str, reason_part: str) -> float | None:
    for entry in audit(store, path):
        if entry.id > after and entry.action == action and reason_part in entry.reason:
            return entry.at.timestamp()
    return None


async def test_worker_link_to_temporal_cut_mid_hold(
    linked: Stack, store: Store, backend: str, figure: Callable[[str], None]
) -> None:
    stack, proxy = linked, linked.worker_temporal
    assert proxy is not None
    path = unique_path("link-hold")
    stack.start_worker()
    stack.start_api()
    await establish_stable(stack, path)
    before = max(entry.id for entry in audit(store, path))
    # The canary's hold outlasts its lease: only renewals keep the canary on the new value.
    request = _request(path, canary_hold=f"{LEASE_SECONDS + 5}s")
    with LeaseWatch(stack, path) as watch:
        handle = await stack.start_rollout(request)

        def holding() -> bool:
            return _entry_at(store, path, before, "rollout.holding", "") is not None

        await wait_until_async(holding, what="the canary stage to hold", timeout=60, interval=0.05)
        await asyncio.sleep(1)
        proxy.cut()
        cut_at = time.time()
        await asyncio.sleep(CUT_SECONDS)
        proxy.restore()
        back_at = time.time()
        renewed = await wait_until_async(
            lambda: watch.renewed_after(back_at),
            what="the canary's lease to be renewed after the link returned",
            timeout=LEASE_SECONDS,
            interval=0.2,
        )
        result = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)
        await asyncio.sleep(0.5)  # the watch sees the promotion
    margin = watch.assert_never_lapsed(str(result["version"]))
    recovery = renewed - back_at
    figure(
        f"worker's link to Temporal cut {back_at - cut_at:.0f}s mid-hold ({backend}): lease "
        f"renewed {recovery:.1f}s after the link returned, smallest lease margin {margin:.0f}s"
    )
    await assert_ended_cleanly(stack, store, path, result)
    assert recovery < RECOVERY_BOUND_SECONDS, f"the renewal came {recovery:.1f}s after the link"


async def test_worker_link_to_temporal_cut_mid_publish(
    linked: Stack, store: Store, backend: str, figure: Callable[[str], None]
) -> None:
    stack, proxy = linked, linked.worker_temporal
    assert proxy is not None
    path = unique_path("link-publish")
    stall = StoreStall(stack.database_url)
    stack.start_worker()
    stack.start_api()
    await establish_stable(stack, path)
    before = max(entry.id for entry in audit(store, path))
    with LeaseWatch(stack, path) as watch:
        handle = await stack.start_rollout(_request(path, canary_hold="3s"))
        # PostgreSQL's stall lets reads and the transitions through, so it can start early
        # (test_worker_kill's STALL_EARLY); SQLite's blocks every write, so it starts only when
        # stage 2's publish is announced.
        moment = ("stage.published", "stage 1 ")
        if backend == "sqlite":
            moment = ("rollout.publishing", "stage 2/2")

        def at_the_moment() -> bool:
            return _entry_at(store, path, before, *moment) is not None

        await wait_until_async(at_the_moment, what=str(moment), timeout=60, interval=0.01)
        stall.begin()
        try:
            # The publish running in the worker, held in its store write: the link is cut under
            # it. SQLite's stall may come just too late (the publish done): the cut comes then.
            def published() -> float | None:
                return _entry_at(store, path, before, "stage.published", "stage 2 ")

            async def caught_or_done() -> bool:
                if published() is not None:
                    return True
                # Announced first: a publish running before that is stage 1's, still reporting.
                announced = _entry_at(store, path, before, "rollout.publishing", "stage 2/2")
                return announced is not None and await activity_started(
                    handle, PUBLISH_STAGE_ACTIVITY
                )

            await wait_until_async(caught_or_done, what="stage 2's publish", timeout=30)
            caught = published() is None
            proxy.cut()
            cut_at = time.time()
        finally:
            # Its write commits while the worker cannot report it done: the server times the
            # attempt out (10 s heartbeat timeout) and the worker runs it again after the cut.
            await asyncio.sleep(2)
            stall.release()
        await wait_until_async(
            published, what="the stalled publish to commit", timeout=30, interval=0.1
        )
        committed = time.time()  # seen committed (its entry's time is when it was written)
        if backend == "postgresql":
            assert caught, "PostgreSQL's stall holds the publish: the race cannot be lost"
        await asyncio.sleep(max(0.0, cut_at + CUT_SECONDS - time.time()))
        proxy.restore()
        back_at = time.time()
        result = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)
        ended_at = time.time()
        await asyncio.sleep(0.5)  # the watch sees the promotion
    margin = watch.assert_never_lapsed(str(result["version"]))
    retried = await retried_activities(handle)
    figure(
        f"worker's link to Temporal cut {back_at - cut_at:.0f}s mid-publish ({backend}): "
        + (
            f"the publish committed {committed - cut_at:.1f}s into the cut"
            if caught
            else "the publish had committed just before the cut"
        )
        + f", the rollout "
        f"ended {result['outcome']} {ended_at - back_at:.1f}s after the link returned "
        f"(3 s hold included), run again {retried or 'none'}, smallest lease margin {margin:.0f}s"
    )
    await assert_ended_cleanly(stack, store, path, result)
