"""GET /healthz (liveness: the process serves) and GET /readyz (readiness: snapshots to serve
from, and their age), with the store taken away for real on each backend."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from starlette.applications import Starlette

from tempoconf.api.app import create_app
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable, sample
from tests.fixtures.waiting import eventually

PATH = "myproject/server_config"


@pytest.fixture
def api_database_url(database_url: str) -> str:
    """An outage looks different on each backend: every test here runs on both."""
    return database_url


def take_the_store_away(store: Store, url: str) -> None:
    """The database goes away for real: SQLite's file and folder are removed, PostgreSQL's
    database is dropped (its connections closed): no connection can be opened any more."""
    database = make_url(url)
    if database.get_backend_name() == "sqlite":
        assert database.database is not None
        # Files first: a connection SQLite opens after the close and before the removal (the app
        # polls every 0.02 s) would keep reading the removed file, and the store would never look
        # gone (seen once in CI). Once the folder is gone no connection can open; then the close
        # ends the ones already open.
        shutil.rmtree(Path(database.database).parent)
        store.close()
        return
    store.close()
    admin = create_engine(
        database.set(database="postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool
    )
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{database.database}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest_asyncio.fixture
async def outage_app(
    api_database_url: str, settings: Settings
) -> AsyncIterator[tuple[Starlette, Store, httpx.AsyncClient]]:
    """An app over a store of its own (so the test can take it away), in its lifespan."""
    store = Store(api_database_url, migrate=True)
    make_stable(store, PATH, {"v": 1})
    app = create_app(store, settings, poll_interval=0.02, listen_poll_interval=0.02)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
            ) as http:
                yield app, store, http
    finally:
        store.close()


async def test_both_report_the_revision_served_and_readyz_its_age(
    api_store: Store, app: Starlette, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await app.state.snapshot_cache.refresh()

    health = await client.get("/healthz")
    ready = await client.get("/readyz")
    fresh_enough = await client.get("/readyz", params={"max_age": "3600"})

    assert health.status_code == 200
    assert health.json() == {"status": "ok", "revision": api_store.revision()}
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready" and body["store"] == "ok" and "error" not in body
    assert body["revision"] == api_store.revision()
    assert 0 <= body["snapshot_age_seconds"] < 3600
    assert fresh_enough.status_code == 200
    age = sample((await client.get("/metrics")).text, "tempoconf_api_snapshot_age_seconds")
    assert age is not None and age >= 0


async def test_a_store_outage_keeps_the_instance_live_and_ready_and_its_snapshots_age(
    api_database_url: str, outage_app: tuple[Starlette, Store, httpx.AsyncClient]
) -> None:
    """Polls are served from memory during a database outage: a load balancer acting on either
    endpoint must not pull the instance; a monitor sees the age grow and the store's error."""
    app, store, http = outage_app
    revision = store.revision()
    await app.state.snapshot_cache.refresh()

    take_the_store_away(store, api_database_url)

    async def store_unreachable() -> dict[str, Any]:
        ready = await http.get("/readyz")
        assert ready.status_code == 200, ready.text
        body: dict[str, Any] = ready.json()
        assert body["store"] == "unreachable", body
        assert body["snapshot_age_seconds"] > 0.5, body
        return body

    body = await eventually(store_unreachable, what="/readyz to see the store gone, aging")
    health = await http.get("/healthz")
    poll = await http.get(f"/v1/configs/{PATH}", params={"client": "host-1"})
    stale = await http.get("/readyz", params={"max_age": "0.5"})
    metrics = (await http.get("/metrics")).text

    assert health.status_code == 200
    assert health.json() == {"status": "ok", "revision": revision}
    assert body["status"] == "ready" and body["revision"] == revision
    assert "cannot refresh the config snapshots" in body["error"]
    assert poll.status_code == 200 and poll.json()["value"] == {"v": 1}
    assert stale.status_code == 503
    assert stale.json()["status"] == "unavailable"
    assert "more than max_age=0.5" in stale.json()["error"]
    assert "cannot refresh the config snapshots" in stale.json()["error"]
    age = sample(metrics, "tempoconf_api_snapshot_age_seconds")
    assert age is not None and age >= body["snapshot_age_seconds"]


async def test_before_the_first_load_readyz_is_503_and_healthz_200(
    api_database_url: str, settings: Settings
) -> None:
    store = Store(api_database_url, migrate=True)
    take_the_store_away(store, api_database_url)
    app = create_app(store, settings, poll_interval=0.02, listen_poll_interval=0.02)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            health = await http.get("/healthz")
            ready = await http.get("/readyz")
            metrics = (await http.get("/metrics")).text

    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"
    assert "not loaded from the store yet" in ready.json()["error"]
    assert sample(metrics, "tempoconf_api_snapshot_age_seconds") is None


# "": a monitor's URL template that lost its value is told so, not answered as if it asked none.
@pytest.mark.parametrize("max_age", ["abc", "-1", "nan", "inf", ""])
async def test_a_bad_max_age_is_400(max_age: str, client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz", params={"max_age": max_age})

    assert response.status_code == 400
    assert f"max_age={max_age!r}" in response.json()["error"]
