"""The API's connection to Temporal cut (every connection reset, new ones refused, through a proxy)
while a rollout holds: the admin commands that need Temporal answer 503 naming Temporal, with
`Retry-After`, in bounded time; the rollout's status still answers from the store, saying that
Temporal could not tell; polls are served as before. Once the link returns the same commands
work again. The figures are printed."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tempoconf.store.store import Store
from tests.faults.rollouts import (
    ROLLOUT_TIMEOUT_SECONDS,
    CanaryWatch,
    assert_ended_cleanly,
    establish_stable,
    first_value,
    staged,
)
from tests.faults.stack import TEMPOCONF, Stack, audit, unique_path, wait_until_async
from tests.fixtures.temporal import rollout_result

pytestmark = pytest.mark.faults

ADMIN_TOKEN = "fault-test-admin"
ANSWER_BOUND_SECONDS = 30.0
"""Does not hang: the operations wait at most 15 s for one answer of Temporal's."""


@pytest.fixture
def linked(stack: Stack) -> Stack:
    """The stack whose API reaches Temporal through `stack.api_temporal`."""
    stack.api_temporal = stack.temporal_proxy()
    stack.api_settings["TEMPOCONF_ADMIN_TOKEN"] = ADMIN_TOKEN  # the CLI's API mode needs one
    return stack


def _admin(
    stack: Stack, method: str, route: str, body: dict[str, Any] | None = None
) -> tuple[httpx.Response, float]:
    """The answer to an admin request, and how long it took."""
    started = time.monotonic()
    answer = httpx.request(
        method,
        f"{stack.api_url}/v1/admin/{route}",
        json=body,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=ANSWER_BOUND_SECONDS,
    )
    return answer, time.monotonic() - started


def _assert_names_temporal(answer: httpx.Response, what: str) -> None:
    assert answer.status_code == 503, f"{what}: {answer.status_code} {answer.text}"
    error = answer.json()["error"]
    assert "Temporal at 127.0.0.1:" in error, f"{what}: {error}"
    assert int(answer.headers["retry-after"]) > 0, f"{what}: {dict(answer.headers)}"


async def test_api_link_to_temporal_cut(
    linked: Stack, store: Store, backend: str, figure: Callable[[str], None]
) -> None:
    stack, proxy = linked, linked.api_temporal
    assert proxy is not None
    path, other = unique_path("api-link"), unique_path("api-link-other")
    stack.start_worker()
    stack.start_api()
    stable = await establish_stable(stack, path)
    before = max(entry.id for entry in audit(store, path))
    # Started through the API: its client is connected before the cut. The canary holds until
    # an `advance` after the cut.
    request = staged(path, cooldown="1h")
    request["stages"][1]["cooldown"] = "2s"
    answer, _ = _admin(stack, "POST", "rollouts", request)
    assert answer.status_code == 202, answer.text

    def holding() -> bool:
        return any(e.id > before and e.action == "rollout.holding" for e in audit(store, path))

    await wait_until_async(holding, what="the canary stage to hold", timeout=60, interval=0.05)
    with CanaryWatch(stack, path) as watch:
        await asyncio.sleep(1)
        served_before = len(watch.canary)
        proxy.cut()
        took: dict[str, float] = {}
        for what, method, route, body in (
            ("start", "POST", "rollouts", first_value(other)),
            ("advance", "POST", f"rollouts/{path}:advance", {"reason": "during the cut"}),
        ):
            answer, took[what] = await asyncio.to_thread(_admin, stack, method, route, body)
            _assert_names_temporal(answer, what)
        answer, took["status"] = await asyncio.to_thread(_admin, stack, "GET", f"rollouts/{path}")
        assert answer.status_code == 200, answer.text
        state = answer.json()
        assert "Temporal at 127.0.0.1:" in state["workflow"]["error"], state["workflow"]
        assert state["lock"] is not None and state["rollout"] is not None, state  # the store's
        started = time.monotonic()
        status = await asyncio.to_thread(
            subprocess.run,
            [str(TEMPOCONF), "rollout", "status", path],
            env=stack.env(TEMPOCONF_ADMIN_TOKEN=ADMIN_TOKEN),  # API mode: URL and token
            capture_output=True,
            text=True,
            timeout=60,
        )
        took["rollout status (CLI)"] = time.monotonic() - started
        assert status.returncode == 1, status.stdout + status.stderr
        assert "Temporal at 127.0.0.1:" in status.stderr, status.stderr
        during = watch.canary[served_before:]
        proxy.restore()
        await asyncio.sleep(0.5)
    assert during and None not in during, f"polls failed during the cut: {during}"
    assert set(during) == {during[0]} != {stable}, f"the canary's version moved: {set(during)}"
    for what, seconds in took.items():
        assert seconds < ANSWER_BOUND_SECONDS, f"{what} answered after {seconds:.1f}s"

    # The link is back: the same commands work (the client reconnects by itself).
    back_at = time.monotonic()

    def status_reads() -> bool:
        answer, _ = _admin(stack, "GET", f"rollouts/{path}")
        return answer.status_code == 200 and answer.json()["workflow"].get("error") is None

    await wait_until_async(
        lambda: asyncio.to_thread(status_reads), what="status from Temporal", timeout=60
    )
    recovered = time.monotonic() - back_at
    answer, _ = _admin(stack, "POST", "rollouts", first_value(other))
    assert answer.status_code == 202, answer.text
    answer, _ = _admin(stack, "POST", f"rollouts/{path}:advance", {"reason": "link back"})
    assert answer.status_code == 200, answer.text
    handle = (await stack.client()).get_workflow_handle(f"rollout:default/{path}")
    advanced = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)
    figure(
        f"API's link to Temporal cut ({backend}): "
        + ", ".join(f"{what} answered in {seconds:.1f}s" for what, seconds in took.items())
        + f"; {len(during)} polls served meanwhile; status read from Temporal again "
        f"{recovered:.1f}s after the link returned"
    )
    # The hour's hold was advanced past by the command sent after the cut: one stage at a time.
    await assert_ended_cleanly(stack, store, path, advanced)
