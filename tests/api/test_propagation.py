"""The cache follows the store's revision: writes from another Store object or process show up."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tempoconf.api.app import create_app
from tempoconf.api.snapshots import SnapshotCache
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import long_polls_waiting, make_stable, sample
from tests.fixtures.waiting import eventually

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
    other = Store(api_database_url, migrate=True)
    try:
        make_stable(other, PATH, {"v": 2})
    finally:
        other.close()

    async def sees_v2() -> bool:
        return await served_value(client) == {"v": 2}

    await eventually(sees_v2, what="the API to serve the other store object's write")
    assert cache.revision == api_store.revision()


async def test_write_from_another_process_is_served(
    api_database_url: str, api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    assert await served_value(client) is None  # unknown so far
    script = textwrap.dedent(
        f"""
        from tempoconf.store.store import Store
        from tests.api.helpers import make_stable
        store = Store({api_database_url!r}, migrate=True)
        make_stable(store, {PATH!r}, {{"from": "another process"}})
        store.close()
        """
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr

    async def sees_it() -> bool:
        return await served_value(client) == {"from": "another process"}

    await eventually(sees_it, what="the API to serve the other process's write")


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


async def test_a_change_in_another_process_wakes_a_waiting_long_poll(
    api_database_url: str, api_store: Store, settings: Settings
) -> None:
    """SQLite: the fast revision poll. PostgreSQL: NOTIFY alone (the poll is switched off here)."""
    postgresql = api_store.dialect == "postgresql"
    interval = 3600.0 if postgresql else 0.05
    app = create_app(api_store, settings, poll_interval=interval, listen_poll_interval=interval)
    make_stable(api_store, PATH, {"v": 1})
    async with app.router.lifespan_context(app):
        if postgresql:
            listening = app.state.change_listener.listening
            await eventually(listening.is_set, what="the store's NOTIFY listener listening")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            first = await http.get(URL, params={"client": "host-1"})
            assert first.json()["value"] == {"v": 1}
            poll = asyncio.create_task(
                http.get(
                    URL,
                    params={"client": "host-1", "wait": "60"},
                    headers={"If-None-Match": first.headers["etag"]},
                )
            )
            await long_polls_waiting(http, 1)
            assert not poll.done()
            script = textwrap.dedent(
                f"""
                from tempoconf.store.store import Store
                from tests.api.helpers import make_stable
                store = Store({api_database_url!r}, migrate=True)
                make_stable(store, {PATH!r}, {{"v": 2}})
                store.close()
                """
            )
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-c", script],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr

            response = await poll
            metrics = (await http.get("/metrics")).text

    assert response.status_code == 200
    assert response.json()["value"] == {"v": 2}
    # Woken by the change, not answered at its deadline (by then with the change too).
    assert sample(metrics, "tempoconf_api_long_poll_wakeups_total") == 1


async def test_postgresql_listener_reconnects_after_losing_its_connection(
    postgresql_url: str, settings: Settings
) -> None:
    store = Store(postgresql_url, migrate=True)
    try:
        app = create_app(store, settings, poll_interval=3600, listen_poll_interval=3600)
        make_stable(store, PATH, {"v": 1})
        async with app.router.lifespan_context(app):
            listener = app.state.change_listener
            await asyncio.wait_for(listener.listening.wait(), timeout=10)
            cache: SnapshotCache = app.state.snapshot_cache
            assert (listener.connections, cache.poll_interval) == (1, 3600)
            # Kill every LISTEN connection of this database from the server side.
            database = make_url(postgresql_url).database
            with create_engine(postgresql_url, poolclass=NullPool).connect() as conn:
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :db AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'"
                    ),
                    {"db": database},
                )

            async def relistening() -> bool:
                return listener.connections == 2 and cache.poll_interval == 3600

            await eventually(
                relistening, what="the listener to LISTEN again on a second connection"
            )
            make_stable(store, PATH, {"v": 2})

            async def sees_v2() -> bool:
                snapshot = cache.get("default", PATH)
                return (
                    snapshot is not None
                    and snapshot.stable is not None
                    and (snapshot.stable.value == {"v": 2})
                )

            await eventually(sees_v2, what="a NOTIFY to bring v2 into the cache")
    finally:
        store.close()
