"""SnapshotCache: refresh on demand, change events for waiters (the long-poll builds on them)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from tempoconf.api.snapshots import SnapshotCache, SnapshotsNotLoadedError
from tempoconf.resolution import ConfigSnapshot
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.waiting import eventually

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


async def test_a_refresh_sets_the_event_of_each_config_it_changes(api_store: Store) -> None:
    make_stable(api_store, PATH, {"v": 1})
    make_stable(api_store, "other/config", {"v": 1})
    cache = SnapshotCache(api_store)
    await cache.refresh()
    changed = cache.changed_for("default", PATH)
    unchanged = cache.changed_for("default", "other/config")

    make_stable(api_store, PATH, {"v": 2})
    await cache.refresh()

    assert changed.is_set()
    assert not unchanged.is_set()  # its snapshot is the same: its waiters sleep on
    assert not cache.changed_for("default", PATH).is_set()  # a fresh event for the next change


async def test_the_poller_refreshes_only_when_the_revision_moves(
    api_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = checks = 0
    load, revision = api_store.load_snapshots_with_revision, api_store.revision

    def counted() -> tuple[int, dict[tuple[str, str], ConfigSnapshot]]:
        nonlocal loads
        loads += 1
        return load()

    def checked() -> int:
        nonlocal checks
        checks += 1
        return revision()

    monkeypatch.setattr(api_store, "load_snapshots_with_revision", counted)
    monkeypatch.setattr(api_store, "revision", checked)
    cache = SnapshotCache(api_store, poll_interval=0.02)
    async with cache.running():
        event = cache.changed_for("default", PATH)
        await eventually(lambda: checks >= 5, what="five revision checks by the poller")
        assert loads == 1 and not event.is_set()  # nothing written: no reload after the first

        make_stable(api_store, PATH, {"v": 2})

        await asyncio.wait_for(event.wait(), timeout=5)
        snapshot = cache.get("default", PATH)
        assert snapshot is not None and snapshot.stable is not None
        assert snapshot.stable.value == {"v": 2}


async def test_a_full_load_runs_without_the_cyclic_collector_and_leaves_it_as_it_was(
    api_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every collection during a load of every config would scan the heap the load grows."""
    make_stable(api_store, "myproject/gc", {"v": 1})
    load = api_store.load_snapshots_with_revision
    collector_on_during_load: list[bool] = []

    def recording() -> tuple[int, dict[tuple[str, str], ConfigSnapshot]]:
        collector_on_during_load.append(gc.isenabled())
        return load()

    monkeypatch.setattr(api_store, "load_snapshots_with_revision", recording)
    assert gc.isenabled()
    await SnapshotCache(api_store).refresh()
    assert collector_on_during_load == [False]
    assert gc.isenabled()

    gc.disable()  # an embedding program's choice is kept
    try:
        await SnapshotCache(api_store).refresh()
        assert not gc.isenabled()
    finally:
        gc.enable()
