"""`GET /v1/changes` on the API (its lifespan, a real store): a first call resets, a long-poll
answers with the configs a store change touched as soon as the snapshots hold it, a namespace
filter keeps other namespaces' changes out, a `since` the process cannot vouch for resets, bad
input is a 400 naming the parameter, and shutdown answers the waiters at once."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from tempoconf.api import change_feed
from tempoconf.api.change_feed import CATCH_UP, ChangeFeed
from tempoconf.api.snapshots import SnapshotCache
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.timeout(60)


async def changes(http: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await http.get("/v1/changes", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def parked(feed: ChangeFeed, count: int = 1) -> None:
    """Wait until `count` callers wait on the feed for a change (their request is in)."""

    def waiting() -> bool:
        assert feed.waiting == count, f"{feed.waiting} caller(s) waiting"
        return True

    await eventually(waiting, what=f"{count} change feed long-poll(s) waiting")


async def test_a_first_call_resets_and_a_long_poll_gets_the_change(
    client: httpx.AsyncClient, api_store: Store, cache: SnapshotCache, app: Starlette
) -> None:
    feed: ChangeFeed = app.state.change_feed
    make_stable(api_store, "feed/a", {"v": 1})
    await cache.refresh()
    first = await changes(client)
    assert first == {"revision": cache.revision, "reset": True}

    quiet = await changes(client, since=first["revision"])
    assert quiet == {"revision": first["revision"], "changes": [], "reset": False}

    held = asyncio.create_task(changes(client, since=first["revision"], wait=60))
    await parked(feed)  # in before the change: the answer below is a wake-up
    make_stable(api_store, "feed/b", {"v": 1})
    answer = await held
    assert feed.wakeups >= 1  # woken by the change, not answered at its deadline
    assert answer["reset"] is False
    assert answer["changes"] == [{"namespace": "default", "path": "feed/b"}]
    assert answer["revision"] > first["revision"] and answer["revision"] == cache.revision

    # every change after `since` at once, each config once
    make_stable(api_store, "feed/a", {"v": 2})
    await cache.refresh()
    both = await changes(client, since=first["revision"])
    assert both["changes"] == [
        {"namespace": "default", "path": "feed/a"},
        {"namespace": "default", "path": "feed/b"},
    ]


async def test_a_namespace_filter_and_an_unknown_since(
    client: httpx.AsyncClient,
    api_store: Store,
    cache: SnapshotCache,
    app: Starlette,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed: ChangeFeed = app.state.change_feed
    revision = (await changes(client))["revision"]
    make_stable(api_store, "feed/other", {"v": 1}, namespace="team-b")
    await cache.refresh()
    # a change elsewhere: the wait runs out, with the revision to follow on from
    loop = asyncio.get_running_loop()
    began = loop.time()
    mine = await changes(client, since=revision, namespace="team-a", wait=0.5)
    assert loop.time() - began >= 0.45
    assert mine == {"revision": cache.revision, "changes": [], "reset": False}
    theirs = await changes(client, since=revision, namespace="team-b")
    assert theirs["changes"] == [{"namespace": "team-b", "path": "feed/other"}]

    # newer than the process holds (another database): reset, once it had a moment to catch up
    # (CATCH_UP, not the whole wait: a wait that ran out would hang past the test's timeout)
    began = loop.time()
    ahead = await changes(client, since=cache.revision + 1000, wait=60)
    assert ahead == {"revision": cache.revision, "reset": True}
    assert loop.time() - began >= CATCH_UP - 0.1

    # just ahead (another replica told the caller a revision this one is about to load): no
    # reset. The caller is seen waiting to catch up before the change is written, and given as
    # long as the test takes to catch up (a slow machine may take more than the usual 2 s).
    monkeypatch.setattr(change_feed, "CATCH_UP", 60.0)
    held = asyncio.create_task(changes(client, since=cache.revision + 1, wait=60))

    def catching_up() -> bool:
        assert feed.catching_up == 1, f"{feed.catching_up} caller(s) catching up"
        return True

    await eventually(catching_up, what="the long-poll waiting for this process to catch up")
    make_stable(api_store, "feed/other", {"v": 2}, namespace="team-b")
    # Caught up, it waits for a change after its `since`: one more ends that wait.
    await eventually(lambda: feed.catching_up == 0, what="the caller to have caught up")
    make_stable(api_store, "feed/other", {"v": 3}, namespace="team-b")
    caught_up = await held
    assert caught_up["reset"] is False, caught_up
    assert caught_up["changes"] == [{"namespace": "team-b", "path": "feed/other"}]


async def test_a_since_older_than_the_ring_resets(
    client: httpx.AsyncClient, api_store: Store, cache: SnapshotCache
) -> None:
    feed = ChangeFeed(cache, entries=2)
    start = cache.revision
    assert feed.read(start, lambda _: True) is None  # nothing yet
    revisions = []
    for value in range(3):
        make_stable(api_store, "feed/ring", {"v": value})
        revisions.append(await cache.refresh())
    assert feed.floor == revisions[0]
    assert feed.read(start, lambda _: True) == feed.read(None, lambda _: True)
    reset = feed.read(start, lambda _: True)
    assert reset is not None and reset.changes is None
    kept = feed.read(revisions[0], lambda _: True)
    assert kept is not None and kept.changes == (("default", "feed/ring"),)
    assert kept.revision == revisions[-1]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"since": "abc"}, "since='abc'"),
        ({"since": "-1"}, "since='-1'"),
        ({"since": "1", "wait": "61"}, "wait='61'"),
        ({"since": "1", "wait": "nan"}, "wait='nan'"),
        ({"namespace": "Not A Namespace"}, "namespace"),
    ],
)
async def test_bad_input_is_a_400_naming_the_parameter(
    client: httpx.AsyncClient, params: dict[str, str], named: str
) -> None:
    response = await client.get("/v1/changes", params=params)
    assert response.status_code == 400, response.text
    assert f"invalid query parameter {named}" in response.json()["error"]


async def test_shutdown_answers_the_waiting_callers(
    client: httpx.AsyncClient, app: Starlette, cache: SnapshotCache
) -> None:
    revision = (await changes(client))["revision"]
    feed: ChangeFeed = app.state.change_feed
    held = asyncio.create_task(changes(client, since=revision, wait=60))
    await parked(feed)
    woken = feed.wakeups
    feed.close()
    answer = await held
    assert feed.wakeups == woken + 1  # answered by the close, not at its deadline
    assert answer == {"revision": cache.revision, "changes": [], "reset": False}
    metrics = (await client.get("/metrics")).text
    assert "tempoconf_api_change_feed_waiting 0.0" in metrics
