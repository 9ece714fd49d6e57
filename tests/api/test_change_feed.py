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

from tempoconf.api.change_feed import ChangeFeed
from tempoconf.api.snapshots import SnapshotCache
from tempoconf.store.store import Store
from tests.api.helpers import make_stable

pytestmark = pytest.mark.timeout(60)


async def changes(http: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await http.get("/v1/changes", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_first_call_resets_and_a_long_poll_gets_the_change(
    client: httpx.AsyncClient, api_store: Store, cache: SnapshotCache
) -> None:
    make_stable(api_store, "feed/a", {"v": 1})
    await cache.refresh()
    first = await changes(client)
    assert first == {"revision": cache.revision, "reset": True}

    quiet = await changes(client, since=first["revision"])
    assert quiet == {"revision": first["revision"], "changes": [], "reset": False}

    held = asyncio.create_task(changes(client, since=first["revision"], wait=20))
    await asyncio.sleep(0.2)
    assert not held.done()
    make_stable(api_store, "feed/b", {"v": 1})
    answer = await asyncio.wait_for(held, 10)
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
    client: httpx.AsyncClient, api_store: Store, cache: SnapshotCache
) -> None:
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
    began = loop.time()
    ahead = await changes(client, since=cache.revision + 1000, wait=5)
    assert ahead == {"revision": cache.revision, "reset": True}
    assert 1.9 <= loop.time() - began < 4.5

    # just ahead (another replica told the caller a revision this one is about to load): no reset
    held = asyncio.create_task(changes(client, since=cache.revision + 1, wait=5))
    await asyncio.sleep(0.3)
    make_stable(api_store, "feed/other", {"v": 2}, namespace="team-b")
    caught_up = await held
    assert caught_up["reset"] is False, caught_up


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
    held = asyncio.create_task(changes(client, since=revision, wait=30))
    await asyncio.sleep(0.2)
    assert app.state.change_feed.waiting == 1
    app.state.change_feed.close()
    answer = await asyncio.wait_for(held, 5)
    assert answer == {"revision": cache.revision, "changes": [], "reset": False}
    metrics = (await client.get("/metrics")).text
    assert "tempoconf_api_change_feed_waiting 0.0" in metrics
