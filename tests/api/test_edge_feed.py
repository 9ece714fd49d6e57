"""`tempoconf edge` (a real subprocess) follows its origin's change feed (`GET /v1/changes`), one
long-poll upstream for every config it serves: a change to one served config fetches that
config's bundle only; the edge serves its own feed to edges behind it; across an origin restart on
the same store it gets the change made while the origin was down (the feed resets: a new process
does not know what came before it), and an origin restarted on a new, empty store resets it too:
its configs are then unknown (404) until they are created there."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.api.server import serve_api
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import ACTOR, make_stable, record, sample
from tests.fixtures.edge import running_edge
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.timeout(180)

TOKEN = "feed-client-token"


@contextmanager
def held_port() -> Iterator[int]:
    """A loopback port held for the whole test, bound without listening (so it gets no
    connections) and with SO_REUSEPORT: the origin binds it beside this socket at each start,
    and no other process can take it while the origin is down between restarts."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])


@asynccontextmanager
async def origin_on(store: Store, port: int) -> AsyncIterator[str]:
    """The real API over `store` on `port` (held by `held_port`: the same port again after a
    restart)."""
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_api(
            Settings(client_token=TOKEN),
            store,
            host="127.0.0.1",
            port=port,
            reuse_port=True,
            on_started=started.set_result,
        )
    )
    try:
        yield await asyncio.wait_for(started, timeout=15)
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass


async def value_of(http: httpx.AsyncClient, path: str) -> Any:
    response = await http.get(f"/v1/configs/{path}")
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    return response.json()["value"]


async def serves(http: httpx.AsyncClient, path: str, value: Any) -> None:
    async def check() -> bool:
        got = await value_of(http, path)
        assert got == value, got
        return True

    await eventually(check, what=f"the edge to serve {path} = {value}", timeout=30)


async def edge_metric(http: httpx.AsyncClient, name: str, **labels: str) -> float:
    found = sample((await http.get("/metrics")).text, name, **labels)
    assert found is not None, name
    return found


@pytest.fixture
def port() -> Iterator[int]:
    with held_port() as held:
        yield held


async def test_the_edge_follows_the_change_feed_across_origin_restarts(
    api_store: Store, tmp_path: Path, port: int
) -> None:
    make_stable(api_store, "feed/a", {"v": 1})
    make_stable(api_store, "feed/b", {"v": 1})
    origin = origin_on(api_store, port)
    url = await origin.__aenter__()
    running: Any = origin
    try:
        async with (
            running_edge(url, tmp_path, client_token=TOKEN, upstream_token=TOKEN) as edge,
            httpx.AsyncClient(
                base_url=edge.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
            ) as http,
        ):

            async def first_reset() -> bool:
                assert await edge_metric(http, "tempoconf_edge_feed_resets_total") == 1
                return True

            await eventually(first_reset, what="the edge's first call of the feed")
            assert await value_of(http, "feed/a") == {"v": 1}
            assert await value_of(http, "feed/b") == {"v": 1}
            fetched = "tempoconf_edge_bundle_fetches_total"
            assert await edge_metric(http, fetched, outcome="ok") == 2
            feed = (await http.get("/v1/changes")).json()
            assert feed["reset"] is True

            # one config changes: its bundle alone is fetched again; the edge's own feed, long-
            # polled since before the change (seen waiting), is woken and says so
            held = asyncio.create_task(
                http.get("/v1/changes", params={"since": feed["revision"], "wait": 60})
            )

            async def feed_waiting() -> bool:
                assert await edge_metric(http, "tempoconf_api_change_feed_waiting") == 1
                return True

            await eventually(feed_waiting, what="the edge's own change feed long-poll waiting")
            before = await edge_metric(http, fetched, outcome="ok")
            for step, value in enumerate(({"v": 1.5}, {"v": 2})):
                # A version written alone (no stable yet) changes nothing the edge serves.
                changed_to = record(value)
                api_store.put_version("default", "feed/a", changed_to)
                api_store.set_stable(
                    "default", "feed/a", changed_to.version, actor=ACTOR, reason="test",
                    event_key=f"a-{step}",
                )  # fmt: skip
                await serves(http, "feed/a", value)
            # Two changes, two fetches of feed/a's bundle. Not a pause: one fetch more (feed/b's,
            # or one for the version written alone) started with the first change had the whole
            # second change, made once the first was served, to be counted.
            assert await edge_metric(http, fetched, outcome="ok") == before + 2
            assert await edge_metric(http, "tempoconf_api_change_feed_wakeups_total") >= 1
            changed = (await held).json()
            assert changed["changes"] == [{"namespace": "default", "path": "feed/a"}]
            assert await edge_metric(http, "tempoconf_edge_watches") == 2

            # the origin goes away; a change is made meanwhile; the origin comes back on the
            # same store: the edge held on, and now gets the change
            await origin.__aexit__(None, None, None)
            running = None
            make_stable(api_store, "feed/b", {"v": 2})
            assert await value_of(http, "feed/a") == {"v": 2}
            assert await value_of(http, "feed/b") == {"v": 1}
            running = origin = origin_on(api_store, port)
            await origin.__aenter__()
            await serves(http, "feed/b", {"v": 2})
            assert await edge_metric(http, "tempoconf_edge_feed_resets_total") == 2

            # the origin comes back on a new, empty store: a reset; the configs are unknown
            # there, then one is created
            await origin.__aexit__(None, None, None)
            running = None
            empty = Store(f"sqlite:///{tmp_path / 'empty.db'}", migrate=True)
            try:
                running = origin = origin_on(empty, port)
                await origin.__aenter__()
                await serves(http, "feed/a", None)
                await serves(http, "feed/b", None)
                assert await edge_metric(http, "tempoconf_edge_feed_resets_total") == 3
                make_stable(empty, "feed/a", {"v": 3})
                await serves(http, "feed/a", {"v": 3})
                await origin.__aexit__(None, None, None)
                running = None
            finally:
                empty.close()
    finally:
        if running is not None:
            await running.__aexit__(None, None, None)
