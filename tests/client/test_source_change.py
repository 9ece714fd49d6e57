"""`on_source_change`: told once per flip of the source, "cache" when the API stops answering and
"api" when it answers again (what the OpenFeature provider's STALE and READY are made of)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tempoconf.client import AsyncConfigClient, ConfigClient
from tempoconf.client._model import Source
from tests.client.helpers import PATH, stable_served
from tests.client.live_api import LiveApi
from tests.fixtures.waiting import eventually, eventually_sync

FAST = {
    "poll_interval": 0.1,
    "min_interval": 0.05,
    "backoff_base": 0.05,
    "backoff_cap": 0.2,
    "timeout": 2,
}


def test_told_once_per_flip(live_api: LiveApi, cache_dir: Path) -> None:
    stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1", cache_dir=cache_dir, **FAST)
    seen: list[tuple[Source, Source | None]] = []

    def told(source: Source) -> None:
        current = client.current  # what a listener reads when it is told
        seen.append((source, current.source if current else None))

    remove = client.on_source_change(told)
    client.start()
    try:
        eventually_sync(lambda: seen == [("api", "api")], what="the first answer")
        live_api.stop()
        eventually_sync(lambda: seen[1:] == [("cache", "cache")], what="the flip to the cache")
        # Failed polls go on while it is down (backoff at most 0.2 s); none is told again.
        eventually_sync(lambda: client.last_error is not None, what="a failed poll")
        live_api.start()
        eventually_sync(lambda: seen[2:] == [("api", "api")], what="the flip back", timeout=20)
        assert [source for source, _ in seen] == ["api", "cache", "api"]

        remove()
        live_api.stop()
        eventually_sync(
            lambda: client.current is not None and client.current.source == "cache",
            what="the cache again",
        )
        assert len(seen) == 3  # removed: not told
    finally:
        client.close()


async def test_a_start_on_an_unreachable_api_flips_nothing_until_it_answers(
    live_api: LiveApi,
) -> None:
    await asyncio.to_thread(stable_served, live_api, {"v": 1})
    await asyncio.to_thread(live_api.stop)
    seen: list[Source] = []
    client = AsyncConfigClient(live_api.url, PATH, client_id="h1", **FAST)
    client.on_source_change(seen.append)
    async with client:
        await eventually(lambda: client.last_error is not None, what="a failed poll")
        assert seen == []  # never reached: nothing flipped
        await asyncio.to_thread(live_api.start)
        await eventually(lambda: seen == ["api"], what="the first answer", timeout=20)
