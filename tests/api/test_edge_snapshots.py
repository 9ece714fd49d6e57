"""`BundleSnapshots` (an edge's snapshots) in process, over the real API on HTTP: a config is
fetched on its first request and kept fresh by the change feed (several at once), a config
unknown upstream is served once created, one nobody asks for is dropped after `idle_after`, the
number served is bounded, and an unreachable upstream fails a first request within the bound."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from tempoconf.api import edge_snapshots
from tempoconf.api.edge_snapshots import BundleSnapshots, UpstreamUnavailableError
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.timeout(60)


async def test_configs_are_fetched_once_then_follow_the_feed(api_store: Store) -> None:
    paths = [f"edge/many_{index}" for index in range(12)]
    for path in paths:
        make_stable(api_store, path, {"v": 1})
    async with (
        live_api(api_store, Settings()) as origin,
        httpx.AsyncClient(base_url=origin) as http,
    ):
        source = BundleSnapshots(http, upstream_wait=5)
        async with source.running():
            await asyncio.gather(*(source.ensure("default", path) for path in paths))
            await source.ensure("default", "edge/later")
            assert source.get("default", "edge/later") is None
            assert source.watched == len(paths) + 1
            for path in paths:
                make_stable(api_store, path, {"v": 2})
            make_stable(api_store, "edge/later", {"v": 1})

            def fresh() -> bool:
                for path in paths:
                    snapshot = source.get("default", path)
                    assert snapshot is not None and snapshot.stable is not None
                    assert snapshot.stable.value == {"v": 2}, path
                assert source.get("default", "edge/later") is not None
                return True

            await eventually(fresh, what="every served config changed through the feed")
            assert source.fetch_counts["failed"] == 0
            assert source.last_error is None and source.age == 0.0


async def test_idle_configs_are_dropped_and_the_number_served_is_bounded(
    api_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_stable(api_store, "edge/a", {"v": 1})
    make_stable(api_store, "edge/b", {"v": 1})
    monkeypatch.setattr(edge_snapshots, "MAX_WATCHES", 1)
    async with (
        live_api(api_store, Settings()) as origin,
        httpx.AsyncClient(base_url=origin) as http,
    ):
        source = BundleSnapshots(http, idle_after=0.4)
        async with source.running():
            await source.ensure("default", "edge/a")
            assert source.get("default", "edge/a") is not None
            with pytest.raises(UpstreamUnavailableError, match="already serves 1 configs"):
                await source.ensure("default", "edge/b")

            def dropped() -> bool:
                assert source.watched == 0
                assert source.get("default", "edge/a") is None
                return True

            await eventually(dropped, what="the idle config dropped", timeout=5)
            await source.ensure("default", "edge/b")  # room again
            assert source.get("default", "edge/b") is not None


async def test_an_unreachable_upstream_fails_a_first_request_within_the_bound() -> None:
    # A port bound without listening: connections to it are refused for as long as it is held.
    with socket.socket() as unreachable:
        unreachable.bind(("127.0.0.1", 0))
        port = unreachable.getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            source = BundleSnapshots(http, first_answer_timeout=0.5)
            async with source.running():
                # The first request waits for the bound (a wait past it would hang the test
                # into its timeout), then fails.
                began = time.monotonic()
                with pytest.raises(UpstreamUnavailableError, match="has not answered for config"):
                    await source.ensure("default", "edge/a")
                assert time.monotonic() - began >= 0.4
                assert not source.loaded and source.last_error is not None
                await asyncio.sleep(0.2)  # past the bound: the known failure is said at once
                # At once: without waiting on anything (one step of the coroutine raises).
                known = source.ensure("default", "edge/a")
                with pytest.raises(
                    UpstreamUnavailableError, match="yet: All connection attempts failed"
                ):
                    known.send(None)
                known.close()
