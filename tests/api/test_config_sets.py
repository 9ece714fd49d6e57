"""GET /v1/configs?path=...&path=...: several configs from one snapshot, one ETag, 304, a
long-poll that wakes on a change of any of them, and clear 400/404s (real HTTP, both backends)."""

from __future__ import annotations

import asyncio

import httpx

from tempoconf.store.store import Store
from tests.api.helpers import long_polls_waiting, make_stable
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually

PATHS = ["shop/frontend", "shop/backend"]


def params(*extra: tuple[str, str]) -> list[tuple[str, str]]:
    return [("path", path) for path in PATHS] + [("client", "host-1"), *extra]


async def test_one_etag_for_all_a_304_and_a_long_poll_that_wakes_on_either(store: Store) -> None:
    for index, path in enumerate(PATHS):
        make_stable(store, path, {"n": index})
    async with live_api(store) as url, httpx.AsyncClient(base_url=url) as api:
        first = await api.get("/v1/configs", params=params())
        assert first.status_code == 200, first.text
        assert [config["value"] for config in first.json()["configs"]] == [{"n": 0}, {"n": 1}]
        etag = first.headers["etag"]
        assert etag.startswith('W/"set.')

        again = await api.get("/v1/configs", params=params(), headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.headers["etag"] == etag

        # The change is made once the long-poll waits (seen by the API's gauge): it wakes it.
        poll = asyncio.create_task(
            api.get("/v1/configs", params=params(("wait", "60")), headers={"If-None-Match": etag})
        )
        await long_polls_waiting(api, 1)
        await asyncio.to_thread(make_stable, store, PATHS[1], {"n": 2})
        # Multi-config long-polls have no wake-up count: the suite's usual wait for an event
        # (15 s) tells a wake-up from the deadline, 60 s away.
        await eventually(poll.done, what="the change to answer the waiting long-poll")
        polled = poll.result()
        assert polled.status_code == 200, polled.text
        assert [config["value"] for config in polled.json()["configs"]] == [{"n": 0}, {"n": 2}]
        assert polled.headers["etag"] != etag


async def test_bad_and_unknown_paths_are_named(store: Store) -> None:
    make_stable(store, PATHS[0], {"n": 0})
    async with live_api(store) as url, httpx.AsyncClient(base_url=url) as api:
        none = await api.get("/v1/configs", params={"client": "host-1"})
        assert none.status_code == 400 and "path is required" in none.json()["error"]
        twice = await api.get("/v1/configs", params=[("path", PATHS[0]), ("path", PATHS[0])])
        assert twice.status_code == 400 and PATHS[0] in twice.json()["error"]
        bad = await api.get("/v1/configs", params=[("path", PATHS[0]), ("path", "a/../b")])
        assert bad.status_code == 400 and "path" in bad.json()["error"]
        unknown = await api.get("/v1/configs", params=params())
        assert unknown.status_code == 404 and PATHS[1] in unknown.json()["error"]
        many = await api.get("/v1/configs", params=[("path", f"p/{n}") for n in range(21)])
        assert many.status_code == 400 and "at most 20" in many.json()["error"]
