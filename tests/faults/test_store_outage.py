"""The store goes away while a rollout publishes: PostgreSQL unreachable (the worker's connection
runs through a proxy the test cuts) or SQLite locked by another connection. The publish completes
once the store is back, exactly once, within a few seconds (issue 12, hole 6: it took 27 s when
store retries backed off to 30 s); the figure is printed."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tempoconf.store.store import Store
from tests.faults.rollouts import (
    ROLLOUT_TIMEOUT_SECONDS,
    CanaryWatch,
    assert_ended_cleanly,
    establish_stable,
    staged,
)
from tests.faults.stack import Stack, audit, unique_path, wait_until_async
from tests.fixtures.temporal import rollout_result

pytestmark = pytest.mark.faults

HOLD_SECONDS = 3.0
OUTAGE_SECONDS = 17.0
"""From just before the hold ends (when the first store write fails). Long enough for the old
30 s retry cap to show: its attempts came 0, 1, 3, 7, 15 and 31 s after the first failure, so a
store back at 17 s waited 14 s. Short enough for the suite's budget."""
RECOVERY_BOUND_SECONDS = 10.0


def _published_at(store: Store, path: str, index: int, after: int) -> float | None:
    for entry in audit(store, path):
        if (
            entry.id > after
            and entry.action == "stage.published"
            and entry.details.get("index") == index
        ):
            return entry.at.timestamp()
    return None


async def _roll_out_through_outage(
    stack: Stack,
    store: Store,
    path: str,
    *,
    cut: Callable[[], None],
    restore: Callable[[], None],
    what: str,
    figure: Callable[[str], None],
    outage: float = OUTAGE_SECONDS,
) -> None:
    stack.start_worker()
    stack.start_api()
    stable = await establish_stable(stack, path)
    before = max(entry.id for entry in audit(store, path))
    # No health checks: an end-of-hold check that finds the store gone is another story.
    request = staged(path, cooldown=f"{HOLD_SECONDS:g}s", health=[])
    with CanaryWatch(stack, path) as watch:
        handle = await stack.start_rollout(request)

        def holding() -> bool:
            return any(
                entry.id > before and entry.action == "rollout.holding"
                for entry in audit(store, path)
            )

        await wait_until_async(holding, what="stage 1 to hold", timeout=60, interval=0.02)
        await asyncio.sleep(HOLD_SECONDS - 0.5)  # the next write (stage 2) fails at once
        cut()
        cut_at = time.time()
        await asyncio.sleep(outage)
        assert _published_at(store, path, 1, before) is None, "stage 2 published during the outage"
        restore()
        back_at = time.time()
        published = await wait_until_async(
            lambda: _published_at(store, path, 1, before),
            what="stage 2 to be published after the store came back",
            timeout=60,
            interval=0.05,
        )
        result = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)
    recovery = published - back_at
    figure(
        f"{what} for {back_at - cut_at:.1f}s during the publish: next stage published "
        f"{recovery:.1f}s after the store came back"
    )
    await assert_ended_cleanly(stack, store, path, result)
    watch.assert_canary_kept(str(result["version"]), stable)
    assert recovery < RECOVERY_BOUND_SECONDS, f"the publish resumed {recovery:.1f}s after the store"


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_postgresql_unreachable_during_publish(
    stack: Stack, store: Store, figure: Callable[[str], None]
) -> None:
    assert stack.proxy is not None
    path = unique_path("pg-cut")
    await _roll_out_through_outage(
        stack, store, path, cut=stack.proxy.cut, restore=stack.proxy.restore,
        what="PostgreSQL unreachable", figure=figure,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_sqlite_locked_during_publish(
    stack: Stack, store: Store, figure: Callable[[str], None]
) -> None:
    database = Path(make_url(stack.database_url).database or "")
    holder = sqlite3.connect(database, isolation_level=None, check_same_thread=False)

    def lock() -> None:
        holder.execute("BEGIN EXCLUSIVE")

    def unlock() -> None:
        holder.execute("ROLLBACK")

    path = unique_path("sqlite-lock")
    try:
        await _roll_out_through_outage(
            stack, store, path, cut=lock, restore=unlock, what="SQLite locked", figure=figure,
            outage=10,  # each write waits out its 5 s busy timeout, then is retried
        )  # fmt: skip
    finally:
        holder.close()
