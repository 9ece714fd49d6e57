"""Bearer tokens: admin endpoints need the admin token, config reads and reports the client
token, each only when configured. Missing or wrong: 401 with WWW-Authenticate, nothing changed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from tempoconf.api.app import create_app
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.store.helpers import report_sums

PATH = "myproject/server_config"
ADMIN = "admin-secret"
CLIENT = "client-secret"


@pytest_asyncio.fixture
async def guarded(api_store: Store, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(data_dir=tmp_path, admin_token=ADMIN, client_token=CLIENT)
    make_stable(api_store, PATH, {"v": 1})
    app = create_app(api_store, settings, poll_interval=0.05)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


BAD_CREDENTIALS = [
    {},
    bearer("wrong"),
    bearer(""),
    {"Authorization": f"Basic {CLIENT}"},
    {"Authorization": "Bearer"},
]


@pytest.mark.parametrize("headers", BAD_CREDENTIALS)
async def test_config_reads_need_the_client_token(
    headers: dict[str, str], guarded: httpx.AsyncClient
) -> None:
    refused = await guarded.get(f"/v1/configs/{PATH}", headers=headers)
    admin_token = await guarded.get(f"/v1/configs/{PATH}", headers=bearer(ADMIN))
    allowed = await guarded.get(f"/v1/configs/{PATH}", headers=bearer(CLIENT))
    lowercase_scheme = await guarded.get(
        f"/v1/configs/{PATH}", headers={"Authorization": f"bearer {CLIENT}"}
    )

    for response in (refused, admin_token):
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "token" in response.json()["error"]
    assert allowed.status_code == 200 and allowed.json()["value"] == {"v": 1}
    assert lowercase_scheme.status_code == 200


@pytest.mark.parametrize("headers", BAD_CREDENTIALS)
async def test_reports_need_the_client_token_and_store_nothing_without_it(
    headers: dict[str, str], api_store: Store, guarded: httpx.AsyncClient
) -> None:
    version = api_store.get_stable("default", PATH).version  # type: ignore[union-attr]
    report = {"path": PATH, "client": "h", "version": version, "ok": 1, "failed": 0}

    refused = await guarded.post("/v1/reports", json=report, headers=headers)

    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    since = datetime.now(UTC) - timedelta(minutes=5)
    assert report_sums(api_store, "default", PATH, version, since=since).reports == 0
    accepted = await guarded.post("/v1/reports", json=report, headers=bearer(CLIENT))
    assert accepted.status_code == 202
    assert report_sums(api_store, "default", PATH, version, since=since).reports == 1


@pytest.mark.parametrize("headers", [*BAD_CREDENTIALS, bearer(CLIENT)])
async def test_admin_endpoints_need_the_admin_token_and_change_nothing_without_it(
    headers: dict[str, str], api_store: Store, guarded: httpx.AsyncClient
) -> None:
    schema = {"type": "object"}
    history_before = api_store.history("default", PATH)
    calls = [
        guarded.put(f"/v1/admin/schemas/{PATH}", json={"schema": schema}, headers=headers),
        guarded.get(f"/v1/admin/schemas/{PATH}", headers=headers),
        guarded.get(f"/v1/admin/versions/{PATH}", headers=headers),
        guarded.get(f"/v1/admin/history/{PATH}", headers=headers),
        guarded.get(f"/v1/admin/clients/{PATH}", headers=headers),
        guarded.get("/v1/admin/configs", headers=headers),
        guarded.get(f"/v1/admin/rollouts/{PATH}", headers=headers),
        guarded.post("/v1/admin/rollouts", json={"path": PATH, "value": 1}, headers=headers),
        guarded.post(f"/v1/admin/rollouts/{PATH}:halt", json={"reason": "x"}, headers=headers),
    ]
    for call in calls:
        response = await call
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert set(response.json()) == {"error"}

    assert api_store.get_schema("default", PATH) is None
    assert api_store.history("default", PATH) == history_before
    assert api_store.get_lock("default", PATH) is None
    allowed = await guarded.put(
        f"/v1/admin/schemas/{PATH}", json={"schema": schema}, headers=bearer(ADMIN)
    )
    assert allowed.status_code == 200
    assert api_store.get_schema("default", PATH) == schema


async def test_health_metrics_and_openapi_need_no_token(guarded: httpx.AsyncClient) -> None:
    for url in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert (await guarded.get(url)).status_code == 200, url


async def test_without_tokens_configured_everything_is_open(
    api_store: Store, tmp_path: Path
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    app = create_app(api_store, Settings(data_dir=tmp_path), poll_interval=0.05)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            assert (await http.get(f"/v1/configs/{PATH}", headers=bearer("x"))).status_code == 200
            assert (await http.get(f"/v1/admin/versions/{PATH}")).status_code == 200
