"""A rollout terminated in the middle of its canary stage (`temporal workflow terminate`: no
compensation runs) leaves a lease nobody renews: the canary keeps the new value until the lease's
`expires_at`, then falls back to stable, and the next rollout of the config reclaims the lock."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import httpx
import pytest

from tempoconf.store.store import Store
from tests.faults.rollouts import CANARY, HOST, establish_stable, staged
from tests.faults.stack import Stack, actions, audit, unique_path, wait_until, wait_until_async
from tests.fixtures.temporal import rollout_result

pytestmark = pytest.mark.faults

LEASE_SECONDS = 6
FALLBACK_BOUND_SECONDS = 3.0


def _canary_answer(stack: Stack, path: str) -> dict[str, object]:
    client, channel = CANARY
    answer = httpx.get(
        f"{stack.api_url}/v1/configs/{path}",
        params={"client": client, "channel": channel},
        timeout=5,
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


async def test_terminated_mid_stage_leases_lapse_and_lock_is_reclaimed(
    stack: Stack, store: Store, figure: Callable[[str], None]
) -> None:
    path = unique_path("terminate")
    stack.start_worker()
    stack.start_api()
    stable = await establish_stable(stack, path)
    before = max(entry.id for entry in audit(store, path))
    request = staged(path, cooldown="10m")
    request["stages"][0]["expiration"] = f"{LEASE_SECONDS}s"
    handle = await stack.start_rollout(request)

    def canary_published() -> bool:
        return any(e.id > before and e.action == "stage.published" for e in audit(store, path))

    await wait_until_async(canary_published, what="the canary stage", timeout=60, interval=0.05)
    await handle.terminate(reason="fault test: terminated mid-stage")
    # The lease as it stands once nothing renews it (a renewal may have moved it meanwhile).
    answer = wait_until(
        lambda: (a := _canary_answer(stack, path))["version"] != stable and a,
        what="the canary to be served the new version",
        timeout=15,
    )
    new = str(answer["version"])
    expires_at = datetime.fromisoformat(str(answer["expires_at"])).timestamp()
    assert stack.served(path, client=HOST[0]) == stable
    while time.time() < expires_at - 0.5:
        served = _canary_answer(stack, path)["version"]
        answered_by = time.time()
        # The API answered at some moment of the request: stable is a lost lease only when the
        # whole request ended before expires_at (under the suite's load one can take 0.5 s).
        assert served == new or answered_by >= expires_at, (
            f"the canary lost its lease early: {served} by {answered_by:.3f}, "
            f"the lease ends at {expires_at:.3f}"
        )
        time.sleep(0.2)
    fell_back_at = wait_until(
        lambda: _canary_answer(stack, path)["version"] == stable and time.time(),
        what="the canary to fall back to stable",
        timeout=30,
    )
    lapse = fell_back_at - expires_at
    figure(f"terminated mid-stage: the canary fell back to stable {lapse:+.1f}s from expires_at")
    assert lapse < FALLBACK_BOUND_SECONDS, f"the lease lapsed {lapse:.1f}s after expires_at"

    # The terminated run's lock never blocks the next rollout: that rollout reclaims it, unless
    # the worker's sweep of ended runs (issue 12, hole 7; not asserted here) released it first.
    held = store.get_lock("default", path) is not None
    next_rollout = await stack.start_rollout(
        {"path": path, "value": {"generation": 3}, "message": "after the terminated one"}
    )
    result = await rollout_result(next_rollout)
    assert result["outcome"] == "promoted", result
    if held:  # reclaimed by the next rollout (or, just before it, ended by the sweep)
        ended = {"lock.reclaimed", "rollout.terminated"} & set(actions(store, path))
        assert ended, actions(store, path)
    assert store.get_lock("default", path) is None
    wait_until(
        lambda: _canary_answer(stack, path)["version"] == result["version"],
        what="the canary to get the next rollout's value",
        timeout=15,
    )
