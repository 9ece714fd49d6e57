"""SnapshotCache: refresh on demand, change events for waiters (the long-poll builds on them)."""

from __future__ import annotations

import asyncio

import pytest

from api.snapshots import SnapshotCache, SnapshotsNotLoadedError
from tempoconf.store.store import Store
from tests.api.helpers import make_stable

PATH = "myproject/server_config"


async def test_refresh_loads_every_config_and_records_the_revision(api_store: Store) -> None:
    cache = SnapshotCache(api_store)
    with pytest.raises(SnapshotsNotLoadedError):
        cache.get("default", PATH)
    make_stable(api_store, PATH, {"v": 1})
    make_stable(api_store, "other/config", {"v": 1}, namespace="team")

    revision = await cache.refresh()

    assert cache.loaded and revision == cache.revision == api_store.revision()
    assert set(cache.snapshots()) == {("default", PATH), ("team", "other/config")}
    snapshot = cache.get("default", PATH)
    assert snapshot is not None and snapshot.stable is not None
    assert snapshot.stable.value == {"v": 1}
    assert cache.get("default", "nope") is None


async def test_each_refresh_sets_the_event_taken_before_it(api_store: Store) -> None:
    cache = SnapshotCache(api_store)
    await cache.refresh()
    before = cache.changed()
    waiter = asyncio.create_task(cache.wait_changed(timeout=5))
    await asyncio.sleep(0)

    await cache.refresh()

    assert before.is_set()
    assert await waiter is True
    assert not cache.changed().is_set()  # a fresh event for the next change
    assert await cache.wait_changed(timeout=0.05) is False


async def test_the_poller_refreshes_only_when_the_revision_moves(api_store: Store) -> None:
    cache = SnapshotCache(api_store, poll_interval=0.02)
    async with cache.running():
        event = cache.changed()
        await asyncio.sleep(0.15)
        assert not event.is_set()  # nothing written: no reload, no wake-up

        make_stable(api_store, PATH, {"v": 2})

        await asyncio.wait_for(event.wait(), timeout=5)
        snapshot = cache.get("default", PATH)
        assert snapshot is not None and snapshot.stable is not None
        assert snapshot.stable.value == {"v": 2}
