"""SnapshotCache refreshes from the store's change log: only the configs changed since the
revision it holds are reloaded and swapped in, and only their waiters are woken; a cache that fell
behind the log reloads everything. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import httpx
import pytest

from tempoconf.api.snapshots import SnapshotCache
from tempoconf.canonical import canonical_json, version_id
from tempoconf.resolution import ConfigSnapshot
from tempoconf.store import change_log
from tempoconf.store.engine import bump_revision
from tempoconf.store.store import Store
from tempoconf.store.tables import ConfigVersion, Stable, table
from tests.api.helpers import long_polls_waiting, make_stable, sample

NS = "default"
Key = tuple[str, str]


@pytest.fixture
def api_database_url(database_url: str) -> str:
    """The delta is read by SQL of each dialect: check it on every backend."""
    return database_url


class CountedLoads:
    """Counts the store's full loads, and records the keys of each change the cache reports."""

    def __init__(self, store: Store, cache: SnapshotCache, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = 0
        self.changes: list[list[Key]] = []
        self._load = load = store.load_snapshots_with_revision

        def counted() -> tuple[int, dict[Key, ConfigSnapshot]]:
            self.full += 1
            return load()

        monkeypatch.setattr(store, "load_snapshots_with_revision", counted)
        cache.on_change(self._changed)

    def in_store(self) -> dict[Key, ConfigSnapshot]:
        """Every config's snapshot in the store now (a full load, not counted)."""
        return self._load()[1]

    def _changed(self, keys: Sequence[Key]) -> None:
        self.changes.append(sorted(keys))


async def test_a_refresh_swaps_in_only_the_changed_configs(
    api_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path in ("a", "b", "c"):
        make_stable(api_store, path, {"v": 1})
    cache = SnapshotCache(api_store)
    loads = CountedLoads(api_store, cache, monkeypatch)
    await cache.refresh()
    before = cache.snapshots()
    old_b = cache.get(NS, "b")

    make_stable(api_store, "b", {"v": 2})
    make_stable(api_store, "d", {"v": 1})  # a new config
    await cache.refresh()

    assert loads.full == 1 and loads.changes == [
        [(NS, "a"), (NS, "b"), (NS, "c")],
        [(NS, "b"), (NS, "d")],
    ]
    assert cache.revision == api_store.revision()
    assert dict(cache.snapshots()) == loads.in_store()
    # The old mapping is untouched (readers may hold it); unchanged snapshots are the same objects.
    assert before[(NS, "b")] is old_b and (NS, "d") not in before
    assert all(cache.get(NS, path) is before[(NS, path)] for path in ("a", "c"))


async def test_a_change_that_leaves_every_snapshot_equal_wakes_nobody(
    api_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = make_stable(api_store, "a", {"v": 1})
    cache = SnapshotCache(api_store)
    loads = CountedLoads(api_store, cache, monkeypatch)
    await cache.refresh()
    held = cache.snapshots()
    event = cache.changed_for(NS, "a")

    # The same version made stable again: the revision moves, the snapshot does not.
    api_store.set_stable(NS, "a", record.version, actor="t", reason="again", event_key="again")
    await cache.refresh()

    assert cache.revision == api_store.revision() and cache.snapshots() is held
    assert not event.is_set() and loads.changes == [[(NS, "a")]] and loads.full == 1


async def test_a_cache_behind_the_logs_retention_reloads_everything_and_serves_the_store(
    api_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_log, "CHANGE_LOG_RETENTION", 6)
    monkeypatch.setattr(change_log, "CHANGE_LOG_PRUNE_EVERY", 3)
    for path in ("a", "b", "c"):
        make_stable(api_store, path, {"v": 0})
    cache = SnapshotCache(api_store)
    loads = CountedLoads(api_store, cache, monkeypatch)
    await cache.refresh()
    held = cache.revision
    events = {path: cache.changed_for(NS, path) for path in ("a", "b", "c")}

    for n in range(1, 6):  # 10 revisions: the one the cache holds falls out of the log
        make_stable(api_store, "a", {"v": n})
    make_stable(api_store, "e", {"v": 1})
    assert held is not None and api_store.load_snapshots_since(held) is None
    await cache.refresh()

    assert loads.full == 2
    assert cache.revision == api_store.revision()
    assert dict(cache.snapshots()) == loads.in_store()
    assert loads.changes[-1] == [(NS, "a"), (NS, "e")]
    assert events["a"].is_set() and not events["b"].is_set() and not events["c"].is_set()

    make_stable(api_store, "b", {"v": 1})  # and from there on, by the log again
    await cache.refresh()
    assert loads.full == 2 and loads.changes[-1] == [(NS, "b")]
    assert dict(cache.snapshots()) == loads.in_store()


# -- 10,000 configs -------------------------------------------------------------------------------

MANY = 10_000


def stable_configs(store: Store, count: int) -> list[str]:
    """`count` configs with a stable version each, written in one transaction (one revision that
    names them all: the store's own write methods would take minutes for so many)."""
    at = datetime(2024, 5, 1, tzinfo=UTC)
    paths = [f"many/{n:05d}" for n in range(count)]
    versions = []
    for n, path in enumerate(paths):
        value = {"n": n}
        versions.append(
            {"namespace": NS, "path": path, "version": version_id(value),
             "value": canonical_json(value), "author": "", "commit": "", "message": "",
             "created_at": at}
        )  # fmt: skip
    stables = [
        {"namespace": NS, "path": row["path"], "version": row["version"], "updated_at": at}
        for row in versions
    ]
    with store._write() as conn:  # white-box: bulk rows, as the store writes them one by one
        conn.execute(table(ConfigVersion).insert(), versions)
        conn.execute(table(Stable).insert(), stables)
        bump_revision(conn, [(NS, path) for path in paths])
    return paths


@pytest.fixture
def many(api_store: Store) -> list[str]:
    """Written before the app starts, so its first load holds them."""
    return stable_configs(api_store, MANY)


async def long_poll(http: httpx.AsyncClient, path: str, client: str) -> httpx.Response:
    """A long-poll on `path` from `client`, with the ETag it holds now."""
    url = f"/v1/configs/{path}"
    first = await http.get(url, params={"client": client})
    assert first.status_code == 200, first.text
    return await http.get(
        url,
        params={"client": client, "wait": "3"},
        headers={"If-None-Match": first.headers["etag"]},
    )


async def test_a_change_to_one_of_ten_thousand_configs_wakes_only_its_waiters(
    many: list[str],
    api_store: Store,
    cache: SnapshotCache,
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert len(cache.snapshots()) == MANY
    loads = CountedLoads(api_store, cache, monkeypatch)
    watched = [many[0], many[4321], many[-1]]
    polls = {
        (path, host): asyncio.create_task(long_poll(client, path, host))
        for path in watched
        for host in ("host-1", "host-2")
    }
    await long_polls_waiting(client, 6)

    make_stable(api_store, many[4321], {"n": "changed"})
    await cache.refresh()

    for host in ("host-1", "host-2"):
        response = await polls[(many[4321], host)]
        assert response.status_code == 200 and response.json()["value"] == {"n": "changed"}
    wakeups = sample((await client.get("/metrics")).text, "tempoconf_api_long_poll_wakeups_total")
    assert wakeups == 2
    assert loads.full == 0 and loads.changes == [[(NS, many[4321])]]
    await long_polls_waiting(client, 4)
    assert not any(
        polls[(path, host)].done() for path in (many[0], many[-1]) for host in ("host-1", "host-2")
    )
    answered = [await poll for poll in polls.values()]
    assert sorted(response.status_code for response in answered) == [200, 200, 304, 304, 304, 304]
