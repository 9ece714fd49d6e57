"""`tempoconf worker` SIGKILLed at each step of a rollout, then started again: the rollout ends as
it should (promoted), each stage published once, one promotion, no lock left, and the canary
keeps the new value from its stage on (the API serves from the store, not from the worker)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.client import WorkflowHandle

from tempoconf.rollout.activity_io import (
    CHECK_HEALTH_ACTIVITY,
    PREPARE_ACTIVITY,
    PROMOTE_ACTIVITY,
    PUBLISH_STAGE_ACTIVITY,
    WATCH_HEALTH_ACTIVITY,
)
from tempoconf.store.store import Store
from tests.faults.rollouts import (
    ROLLOUT_TIMEOUT_SECONDS,
    CanaryWatch,
    assert_ended_cleanly,
    establish_stable,
    staged,
)
from tests.faults.stack import (
    Stack,
    StoreStall,
    actions,
    audit,
    pending_activities,
    retried_activities,
    unique_path,
    wait_until_async,
)
from tests.fixtures.temporal import rollout_result

pytestmark = pytest.mark.faults


class SlowJudge:
    """An `http` health check's judge that answers its first request only after `delay` seconds
    (so the check is still running when the worker is killed), and every later one at once."""

    def __init__(self, delay: float) -> None:
        self.asked = threading.Event()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                first = not judge.asked.is_set()
                judge.asked.set()
                if first:
                    time.sleep(delay)
                try:
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the worker that asked is gone

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/judge"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def judge() -> Iterator[SlowJudge]:
    running = SlowJudge(delay=5)
    try:
        yield running
    finally:
        running.close()


async def _pending(handle: WorkflowHandle[Any, Any], activity: str) -> bool:
    return activity in await pending_activities(handle)


def _entry(store: Store, path: str, after: int, action: str, reason_part: str = "") -> bool:
    """The audit log has `action` (its reason containing `reason_part`) after entry id `after`."""
    return any(
        entry.id > after and entry.action == action and reason_part in entry.reason
        for entry in audit(store, path)
    )


# The activity a moment catches in the middle of its store write (the store stalled until the kill).
STALLED = {
    "prepare": PREPARE_ACTIVITY,
    "publish": PUBLISH_STAGE_ACTIVITY,
    "promotion": PROMOTE_ACTIVITY,
}
# ... and what the audit log says once that step is done.
DONE = {
    "prepare": ("rollout.started", ""),
    "publish": ("stage.published", "stage 2 "),
    "promotion": ("rollout.promoted", ""),
}
# PostgreSQL's stall blocks only the steps that take the rollout lock's row, so it can start a
# step early, once the step before has committed: the race with the step itself is never lost.
STALL_EARLY = {
    "publish": ("stage.published", "stage 1 "),
    "promotion": ("stage.published", "stage 2 "),
}
MOMENTS = ["prepare", "publish", "hold", "health_check", "promotion"]


@pytest.mark.parametrize("moment", MOMENTS)
async def test_worker_sigkilled_then_restarted(
    stack: Stack,
    store: Store,
    judge: SlowJudge,
    moment: str,
    backend: str,
    figure: Callable[[str], None],
) -> None:
    path = unique_path(f"worker-{moment}")
    stall = StoreStall(stack.database_url)
    worker = stack.start_worker()
    stack.start_api()
    stable = await establish_stable(stack, path)
    request = staged(path)
    if moment == "health_check":
        # Checked once at the end of each hold: the first check hangs on the judge.
        request["health"] = [{"kind": "http", "url": judge.url, "timeout": "20s"}]
    if moment == "hold":
        # Also checked every second of the hold: the kill takes the hold's health watch with it.
        request["health"][0]["interval"] = "1s"
    before = max(entry.id for entry in audit(store, path))  # the stable value's entries
    with CanaryWatch(stack, path) as watch:
        if moment == "prepare":
            stall.begin()  # before the start: prepare is the run's first step
        handle = await stack.start_rollout(request)
        started = time.monotonic()

        async def at_the_moment() -> bool:
            if moment == "prepare":
                return True  # the run's first step: stalled below
            if backend == "postgresql" and moment in STALL_EARLY:
                return _entry(store, path, before, *STALL_EARLY[moment])
            if moment == "publish":
                return _entry(store, path, before, "rollout.publishing", "stage 2/2")
            if moment == "hold":
                return _entry(store, path, before, "rollout.holding") and (
                    time.monotonic() - started > 1.0
                )
            if moment == "health_check":
                return judge.asked.is_set()
            return _entry(store, path, before, "rollout.promoting")

        await wait_until_async(
            at_the_moment, what=f"the rollout to reach {moment}", timeout=60, interval=0.01
        )
        stalled = STALLED.get(moment)
        if stalled is not None:
            # Catch the step's activity in the middle: it waits for the store until the kill.
            if moment != "prepare":
                stall.begin()
            done, reason_part = DONE[moment]

            async def caught_or_done() -> bool:
                # Done before the stall took hold (the race is lost): a kill right after it.
                return await _pending(handle, stalled) or _entry(
                    store, path, before, done, reason_part
                )

            await wait_until_async(caught_or_done, what=stalled, timeout=30, interval=0.05)
        running = await pending_activities(handle)
        worker.kill()
        stall.release()
        if moment == "health_check":
            assert CHECK_HEALTH_ACTIVITY in running, running
        if moment == "hold":
            assert WATCH_HEALTH_ACTIVITY in running, running
        if stalled is not None and (backend == "postgresql" or moment == "prepare"):
            assert stalled in running, running  # SQLite's stall may come just too late
        await asyncio.sleep(1)
        stack.start_worker()
        result = await asyncio.wait_for(rollout_result(handle), ROLLOUT_TIMEOUT_SECONDS)
        took = time.monotonic() - started
        new = str(result["version"])
    retried = await retried_activities(handle)
    figure(
        f"worker SIGKILL at {moment}: activities pending at the kill {running or 'none'}, "
        f"run again after it {retried or 'none'}; rollout ended {result['outcome']} "
        f"{took:.1f}s after its start"
    )
    await assert_ended_cleanly(stack, store, path, result)
    watch.assert_canary_kept(new, stable)
    assert actions(store, path).count("rollout.started") == 2, actions(store, path)
