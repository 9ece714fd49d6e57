"""The Temporal dev server SIGKILLed in the middle of a hold and started again on its own db file:
the rollout picks up where it was (the timer is durable) and ends promoted, each stage published
once, one promotion, no lock left; the API serves the canary value throughout (it never needs
Temporal to answer polls)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

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

DOWN_SECONDS = 5.0


async def test_temporal_server_sigkilled_mid_hold(
    stack: Stack, store: Store, figure: Callable[[str], None]
) -> None:
    path = unique_path("temporal-kill")
    stack.start_worker()
    stack.start_api()
    stable = await establish_stable(stack, path)
    before = max(entry.id for entry in audit(store, path))
    with CanaryWatch(stack, path) as watch:
        handle = await stack.start_rollout(staged(path, cooldown="4s"))

        def holding() -> bool:
            return any(e.id > before and e.action == "rollout.holding" for e in audit(store, path))

        await wait_until_async(holding, what="stage 1 to hold", timeout=60, interval=0.05)
        await asyncio.sleep(1)
        stack.temporal().kill()
        await asyncio.sleep(DOWN_SECONDS)  # longer than what is left of the hold
        assert watch.canary[-1] == watch.canary[-2] is not None, "the API stopped serving"
        stack.start_temporal()
        back_at = time.monotonic()
        result = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)
        took = time.monotonic() - back_at
    figure(
        f"Temporal dev server SIGKILLed mid-hold for {DOWN_SECONDS:g}s: rollout ended "
        f"{result['outcome']} {took:.1f}s after the server was back"
    )
    await assert_ended_cleanly(stack, store, path, result)
    watch.assert_canary_kept(str(result["version"]), stable)
