"""API fixtures: a real store (SQLite file by default), the app in its lifespan, an httpx client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from tempoconf.api.app import create_app
from tempoconf.api.snapshots import SnapshotCache
from tempoconf.settings import Settings
from tempoconf.store.store import Store

POLL_INTERVAL = 0.05


@pytest.fixture
def api_database_url(sqlite_url: str) -> str:
    """The database the API serves: a SQLite file (another process can open it too).

    The resolution and HTTP behaviour tested here do not depend on the backend;
    test_propagation.py overrides this to run on every backend.
    """
    return sqlite_url


@pytest.fixture
def api_store(api_database_url: str) -> Iterator[Store]:
    opened = Store(api_database_url, migrate=True)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path)


@pytest.fixture
def app(api_store: Store, settings: Settings) -> Starlette:
    return create_app(api_store, settings, poll_interval=POLL_INTERVAL)


@pytest.fixture
def cache(app: Starlette) -> SnapshotCache:
    snapshot_cache: SnapshotCache = app.state.snapshot_cache
    return snapshot_cache


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """httpx over ASGI, inside the app's lifespan (ASGITransport does not run it)."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://tempoconf.test") as http:
            yield http
