"""GET /healthz."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
from starlette.applications import Starlette

from tempoconf.api.app import create_app
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable


async def test_healthz_reports_the_store_revision(
    api_store: Store, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, "myproject/server_config", {"v": 1})

    response = await client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "revision": api_store.revision()}


async def test_store_outage_is_503_while_polls_keep_their_last_snapshot(
    tmp_path: Path, settings: Settings
) -> None:
    data = tmp_path / "outage"
    store = Store(f"sqlite:///{data / 'tempoconf.db'}", migrate=True)
    make_stable(store, "myproject/server_config", {"v": 1})
    app: Starlette = create_app(store, settings, poll_interval=0.02)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            # The database goes away: no connection can be opened any more.
            store.close()
            shutil.rmtree(data)

            health = await http.get("/healthz")
            poll = await http.get("/v1/configs/myproject/server_config")

    assert health.status_code == 503
    assert health.json()["status"] == "unavailable"
    assert "store unreachable" in health.json()["error"]
    assert poll.status_code == 200 and poll.json()["value"] == {"v": 1}
