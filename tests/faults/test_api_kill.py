"""`tempoconf api` SIGKILLed under running agents, while a rollout publishes its canary stage.

An agent that was running keeps its file on the last good value for the whole outage; an agent
started while the API is down writes the value of its disk cache; both catch up within a few
seconds of the API's return (issue 12, hole 6: 16 s after a 24 s outage with the client's backoff
capped at 30 s). The figures are printed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from tempoconf.store.store import Store
from tests.faults.rollouts import establish_stable, staged
from tests.faults.stack import Stack, audit, unique_path, wait_until, wait_until_async

pytestmark = pytest.mark.faults

OUTAGE_SECONDS = 20.0
RECOVERY_BOUND_SECONDS = 10.0


def _on_generation(out: Path, generation: int) -> bool:
    return _generation(out) == generation


def _generation(out: Path) -> int | None:
    try:
        return int(json.loads(out.read_text())["generation"])
    except (OSError, ValueError, KeyError):
        return None


async def test_api_killed_under_agents(
    stack: Stack, store: Store, tmp_path: Path, figure: Callable[[str], None]
) -> None:
    path = unique_path("api-kill")
    stack.start_worker()
    api = stack.start_api()
    await establish_stable(stack, path)
    running_out, late_out = tmp_path / "running.json", tmp_path / "late.json"
    running = stack.agent(path, running_out, client="canary-1", channel="canary").start()
    late = stack.agent(path, late_out, client="canary-2", channel="canary").start()
    for out in (running_out, late_out):
        wait_until(partial(_on_generation, out, 1), what=f"{out.name} on v1", timeout=30)
    late.stop()  # its disk cache now holds generation 1
    late_out.unlink()

    api.kill()
    down_at = time.monotonic()
    late.start()  # with the API down: it can only have its disk cache
    wait_until(
        lambda: _generation(late_out) == 1, what="the late agent to write its cache", timeout=30
    )
    before = max(entry.id for entry in audit(store, path))
    await stack.start_rollout(staged(path, cooldown="60s"))

    def canary_published() -> bool:
        return any(e.id > before and e.action == "stage.published" for e in audit(store, path))

    await wait_until_async(canary_published, what="the canary stage", timeout=60, interval=0.1)
    while time.monotonic() - down_at < OUTAGE_SECONDS:
        # The last good value, never nothing, for as long as the API is down.
        assert _generation(running_out) == 1, running_out.read_text()
        assert _generation(late_out) == 1, late_out.read_text()
        await asyncio.sleep(0.2)

    outage = time.monotonic() - down_at
    stack.start_api()
    back_at = time.monotonic()
    caught_up: dict[str, float] = {}

    def both_caught_up() -> bool:
        for name, out in (("running", running_out), ("late", late_out)):
            if name not in caught_up and _generation(out) == 2:
                caught_up[name] = time.monotonic() - back_at
        return len(caught_up) == 2

    wait_until(both_caught_up, what="both agents on the canary value", timeout=60, interval=0.05)
    figure(
        f"API SIGKILLed for {outage:.1f}s: the running agent caught up {caught_up['running']:.1f}s "
        f"and the agent started while it was down {caught_up['late']:.1f}s after its return"
    )
    assert "keeping version" in running.output(), running.output()
    for name, seconds in caught_up.items():
        assert seconds < RECOVERY_BOUND_SECONDS, f"the {name} agent took {seconds:.1f}s"
