"""The watcher wakes on a stage publish and on a revert (sync thread and asyncio task)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from tempoconf.client import AsyncConfigClient, ConfigClient, ConfigValue
from tests.api.helpers import publish, start_rollout
from tests.client.helpers import PATH, promote, revert, stable_served
from tests.client.live_api import LiveApi
from tests.fixtures.waiting import eventually, eventually_sync

# The API ignores `wait` until long-poll lands: a short poll interval keeps these tests quick.
FAST = {"poll_interval": 0.1, "min_interval": 0.05}


def test_watch_wakes_on_a_stage_publish_and_on_a_revert(live_api: LiveApi) -> None:
    stable = stable_served(live_api, {"v": 1})
    seen: list[ConfigValue] = []
    changed = threading.Event()

    def on_change(value: ConfigValue) -> None:
        seen.append(value)
        changed.set()

    client = ConfigClient(live_api.url, PATH, client_id="h1", channel="canary", **FAST)
    client.subscribe(on_change)
    with client:
        eventually_sync(
            changed.is_set, what="the first value"
        )  # the first value in use counts as a change
        changed.clear()
        assert (seen[-1].version, seen[-1].source) == (stable.version, "api")

        staged = start_rollout(live_api.store, PATH, {"v": 2})
        publish(live_api.store, PATH, index=0, name="canary", channel="canary")
        eventually_sync(changed.is_set, what="the canary stage")
        changed.clear()
        assert (seen[-1].version, seen[-1].stage) == (staged.version, "canary")
        assert client.get().version == staged.version  # get() while watching: no request, current

        revert(live_api.store)
        eventually_sync(changed.is_set, what="the revert")
        assert (seen[-1].version, seen[-1].stage) == (stable.version, "stable")

    assert [value.version for value in seen] == [stable.version, staged.version, stable.version]
    assert not client.watching


def test_subscribers_get_the_value_in_use_when_watching_starts(live_api: LiveApi) -> None:
    stable = stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1", **FAST)
    seen: list[str] = []
    client.subscribe(lambda value: seen.append(value.version))
    client.subscribe(lambda value: 1 / 0)  # a failing subscriber is logged, the others still run
    client.start()
    try:
        eventually_sync(lambda: seen, what="the first value")
        staged = start_rollout(live_api.store, PATH, {"v": 2})
        publish(live_api.store, PATH, index=0, name="all", percentile=100)
        eventually_sync(lambda: len(seen) == 2, what="the published stage")
    finally:
        client.close()
    assert seen == [stable.version, staged.version]


async def test_async_watch_wakes_on_publish_promote_and_revert(live_api: LiveApi) -> None:
    stable = stable_served(live_api, {"v": 1})
    seen: list[ConfigValue] = []

    async def on_change(value: ConfigValue) -> None:
        seen.append(value)

    client = AsyncConfigClient(live_api.url, PATH, client_id="h1", channel="canary", **FAST)
    client.subscribe(on_change)
    async with client:
        assert client.watching

        async def versions_are(*expected: str) -> bool:
            return [value.version for value in seen] == list(expected)

        await eventually(lambda: versions_are(stable.version), what="the first value")

        staged = await asyncio.to_thread(start_rollout, live_api.store, PATH, {"v": 2})
        await asyncio.to_thread(
            publish, live_api.store, PATH, index=0, name="canary", channel="canary"
        )
        await eventually(
            lambda: versions_are(stable.version, staged.version), what="the canary stage"
        )
        assert seen[-1].stage == "canary"

        # Promotion: same version, now stable. Not a version change: no callback, stage follows.
        await asyncio.to_thread(promote, live_api.store, staged.version)

        async def stable_now() -> bool:
            return (await client.get()).stage == "stable"

        await eventually(stable_now, what="the promoted version's stage to read stable")
        assert len(seen) == 2

        # A second rollout, then its revert: back to the promoted version at once.
        second = await asyncio.to_thread(
            start_rollout, live_api.store, PATH, {"v": 3}, run_id="run-2"
        )
        await asyncio.to_thread(
            publish,
            live_api.store,
            PATH,
            index=0,
            name="canary",
            channel="canary",
            run_id="run-2",
        )
        await eventually(
            lambda: versions_are(stable.version, staged.version, second.version),
            what="the second rollout",
        )
        await asyncio.to_thread(revert, live_api.store, run_id="run-2")
        await eventually(
            lambda: versions_are(stable.version, staged.version, second.version, staged.version),
            what="the revert of the second rollout",
        )
    assert not client.watching


def test_watch_long_polls_a_change_without_waiting_for_the_poll_interval(
    live_api: LiveApi,
) -> None:
    stable_served(live_api, {"v": 1})
    # poll_interval 30 s: only a held poll can bring the change within the timeout below.
    with ConfigClient(
        live_api.url, PATH, client_id="h1", channel="canary", poll_interval=30, long_poll_seconds=20
    ) as client:
        eventually_sync(
            lambda: client.current is not None and client.current.source == "api",
            what="a first value from the API",
        )
        live_api.wait_long_polls(1)  # the watcher is now inside a held poll
        staged = start_rollout(live_api.store, PATH, {"v": 2})
        publish(live_api.store, PATH, index=0, name="canary", channel="canary")
        # 5 s, far below the 30 s poll interval: only the held poll can bring the change this soon.
        value = eventually_sync(
            lambda: client.get().version == staged.version and client.get(),
            what="the staged version",
            timeout=5,
        )
        assert (value.stage, value.source) == ("canary", "api")


def test_watch_never_spins(live_api: LiveApi, caplog: pytest.LogCaptureFixture) -> None:
    stable_served(live_api, {"v": 1})
    caplog.set_level(logging.INFO, logger="uvicorn.access")
    with ConfigClient(
        live_api.url, PATH, client_id="spin-check", poll_interval=0.3, long_poll_seconds=30
    ) as client:
        eventually_sync(lambda: client.current is not None, what="a first value")
        time.sleep(1.5)  # the behaviour under test: how many polls a quiet 1.5 s sees
    polls = [
        r for r in caplog.records if r.name == "uvicorn.access" and "spin-check" in str(r.args)
    ]
    # Held polls: 1-2 requests. Answered at once: one per poll_interval (0.3 s), never a burst.
    assert 1 <= len(polls) <= 1.5 / 0.3 + 2
