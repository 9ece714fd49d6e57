"""The cache follows the store's revision: writes from another Store object or process show up."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from api.snapshots import SnapshotCache
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import assert_eventually, make_stable

PATH = "myproject/server_config"
URL = f"/v1/configs/{PATH}"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def api_database_url(database_url: str) -> str:
    """Propagation rides on the store's revision: check it on every backend."""
    return database_url


async def served_value(http: httpx.AsyncClient) -> object:
    response = await http.get(URL, params={"client": "host-1"})
    return response.json().get("value") if response.status_code == 200 else None


async def test_write_through_another_store_object_is_served(
    api_database_url: str, api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await cache.refresh()
    other = Store(api_database_url)
    try:
        make_stable(other, PATH, {"v": 2})
    finally:
        other.close()

    async def sees_v2() -> bool:
        return await served_value(client) == {"v": 2}

    await assert_eventually(sees_v2)
    assert cache.revision == api_store.revision()


async def test_write_from_another_process_is_served(
    api_database_url: str, api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    assert await served_value(client) is None  # unknown so far
    script = textwrap.dedent(
        f"""
        from tempoconf.store.store import Store
        from tests.api.helpers import make_stable
        store = Store({api_database_url!r})
        make_stable(store, {PATH!r}, {{"from": "another process"}})
        store.close()
        """
    )
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr

    async def sees_it() -> bool:
        return await served_value(client) == {"from": "another process"}

    await assert_eventually(sees_it)


async def test_polls_are_served_from_memory_until_a_refresh(
    api_store: Store, settings: Settings
) -> None:
    app = create_app(api_store, settings, poll_interval=3600)  # no background refresh here
    cache: SnapshotCache = app.state.snapshot_cache
    make_stable(api_store, PATH, {"v": 1})
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            make_stable(api_store, PATH, {"v": 2})
            assert await served_value(http) == {"v": 1}  # no store query per poll

            await cache.refresh()

            assert await served_value(http) == {"v": 2}
