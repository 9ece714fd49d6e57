"""PostgreSQL restarted (stopped fast, every connection ended, then started again a few seconds
later) under a running rollout, once in the middle of a hold and once in the middle of a stage's
publish. The cluster is the test's own (private_postgresql.py): restarting the machine's would
disturb the tests beside it. The rollout resumes and ends promoted, each stage published once;
nothing the store held before the restart is lost; the API serves through it and after it. The
recovery figures are printed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from tempoconf.rollout.activity_io import PUBLISH_STAGE_ACTIVITY
from tempoconf.store.store import Store
from tests.faults.private_postgresql import PrivateCluster
from tests.faults.rollouts import (
    HOST,
    ROLLOUT_TIMEOUT_SECONDS,
    CanaryWatch,
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
from tests.fixtures.database import fresh_postgresql_database
from tests.fixtures.temporal import rollout_result

pytestmark = [pytest.mark.faults, pytest.mark.parametrize("backend", ["postgresql"])]

DOWN_SECONDS = 5.0
"""Longer than what is left of the hold, so the next store write meets the stopped server."""
RECOVERY_BOUND_SECONDS = 15.0
"""A bound, not a goal: the store activities' retries back off to a few seconds."""


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    running = PrivateCluster()
    try:
        running.first_start()
        yield running
    finally:
        running.close()


@pytest.fixture
def postgresql_url(cluster: PrivateCluster) -> Iterator[str]:
    """The stack's database, on the test's own cluster (overrides tests.fixtures.database's)."""
    yield from fresh_postgresql_database(cluster.server_url)


def _published_at(store: Store, path: str, after: int, stage: int) -> float | None:
    for entry in audit(store, path):
        if (
            entry.id > after
            and entry.action == "stage.published"
            and f"stage {stage} " in (entry.reason)
        ):
            return entry.at.timestamp()
    return None


@pytest.mark.parametrize("moment", ["hold", "publish"])
async def test_postgresql_restarted_under_a_rollout(
    stack: Stack,
    store: Store,
    cluster: PrivateCluster,
    moment: str,
    figure: Callable[[str], None],
) -> None:
    path = unique_path(f"pg-restart-{moment}")
    stall = StoreStall(stack.database_url)
    stack.start_worker()
    stack.start_api()
    stable = await establish_stable(stack, path)
    before = max(entry.id for entry in audit(store, path))
    with CanaryWatch(stack, path) as watch:
        handle = await stack.start_rollout(staged(path, cooldown="3s", health=[]))
        # The canary published: its hold has begun, and the stall (which lets the transitions
        # through) can be taken before stage 2's publish starts.
        await wait_until_async(
            lambda: _published_at(store, path, before, 1),
            what="the canary stage",
            timeout=60,
            interval=0.01,
        )
        if moment == "publish":
            stall.begin()

            async def stage_2_publishing() -> bool:
                # Announced first: a publish running before that is stage 1's, still reporting.
                announced = any(
                    entry.id > before
                    and entry.action == "rollout.publishing"
                    and "stage 2/2" in entry.reason
                    for entry in audit(store, path)
                )
                return announced and await activity_started(handle, PUBLISH_STAGE_ACTIVITY)

            await wait_until_async(stage_2_publishing, what="stage 2's publish", timeout=30)
            assert _published_at(store, path, before, 2) is None, "the stall did not hold it"
        else:
            await asyncio.sleep(1)
        kept = [(entry.id, entry.action, entry.reason) for entry in audit(store, path)]
        cluster.stop()  # ends the stall's connection and the publish's transaction with it
        stopped_at = time.time()
        stall.release()
        await asyncio.sleep(DOWN_SECONDS)
        during = list(watch.canary)
        cluster.start()
        back_at = time.time()
        await wait_until_async(
            lambda: _published_at(store, path, before, 2),
            what="stage 2 published after the restart",
            timeout=60,
            interval=0.05,
        )
        published = time.time()
        result = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)
    retried = await retried_activities(handle)
    recovery = published - back_at
    figure(
        f"PostgreSQL restarted mid-{moment} (down {back_at - stopped_at:.1f}s): stage 2 "
        f"published {recovery:.1f}s after it was back, run again {retried or 'none'}, "
        f"{during.count(None)} of {len(during)} canary polls unanswered meanwhile"
    )
    await assert_ended_cleanly(stack, store, path, result)  # the hosts served after it too
    watch.assert_canary_kept(str(result["version"]), stable)
    after = [(entry.id, entry.action, entry.reason) for entry in audit(store, path)]
    assert after[: len(kept)] == kept, "the audit log lost what it held before the restart"
    versions = {info.version for info in store.list_versions("default", path)}
    assert {stable, str(result["version"])} <= versions, versions
    assert stack.served(path, client=HOST[0]) == str(result["version"])
    assert recovery < RECOVERY_BOUND_SECONDS, f"stage 2 came {recovery:.1f}s after the restart"
