"""`GET /v1/admin/configs`: every config the store knows, with its stable version, schema digest
and lock, and the active freezes, in one answer; filtered by repeated `namespace`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio

from tempoconf.api.app import create_app
from tempoconf.canonical import version_id
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable, start_rollout

URL = "/v1/admin/configs"
SCHEMA = {"type": "object", "required": ["n"]}
ADMIN = "admin-secret"


async def test_every_known_config_with_its_stable_schema_and_lock(
    api_store: Store, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, "app/web", {"n": 1})
    api_store.set_schema("default", "app/web", SCHEMA, actor="test")
    api_store.set_schema("payments", "app/schema-only", SCHEMA, actor="test")
    staged = start_rollout(api_store, "app/web", {"n": 2}, run_id="run-7")
    lock = api_store.get_lock("default", "app/web")
    assert lock is not None

    response = await client.get(URL)

    assert response.status_code == 200, response.text
    assert response.json() == {
        "configs": [
            {
                "namespace": "default",
                "path": "app/web",
                "stable_version": stable.version,
                "schema_digest": version_id(SCHEMA),
                "lock": {
                    "workflow_id": "rollout:default/app/web",
                    "run_id": "run-7",
                    "version": staged.version,
                    "acquired_at": lock.acquired_at.isoformat(),
                },
            },
            {
                "namespace": "payments",
                "path": "app/schema-only",
                "stable_version": None,
                "schema_digest": version_id(SCHEMA),
                "lock": None,
            },
        ],
        "freezes": [],
    }


async def test_repeated_namespaces_filter_configs_and_freezes(
    api_store: Store, client: httpx.AsyncClient
) -> None:
    for namespace in ("default", "payments", "search"):
        make_stable(api_store, "app/x", {"ns": namespace}, namespace=namespace)
    api_store.start_freeze("payments", reason="black friday", by="alice")
    api_store.start_freeze("search", reason="incident", by="bob")
    api_store.start_freeze("default", reason="over", by="carol")
    api_store.end_freeze("default", by="carol")  # ended: not listed

    every = (await client.get(URL)).json()
    some = (
        await client.get(URL, params=[("namespace", "search"), ("namespace", "default")])
    ).json()
    none = (await client.get(URL, params={"namespace": "nowhere"})).json()

    assert [c["namespace"] for c in every["configs"]] == ["default", "payments", "search"]
    assert [f["namespace"] for f in every["freezes"]] == ["payments", "search"]
    assert [c["namespace"] for c in some["configs"]] == ["default", "search"]
    [search] = some["freezes"]
    assert (search["namespace"], search["reason"], search["by"]) == ("search", "incident", "bob")
    assert search["active"] is True and search["ended_at"] is None
    # each freeze as GET /v1/admin/freezes answers it
    listed = (await client.get("/v1/admin/freezes", params={"namespace": "search"})).json()
    assert some["freezes"] == listed["freezes"]
    assert none == {"configs": [], "freezes": []}


async def test_an_invalid_namespace_is_a_400_naming_it(client: httpx.AsyncClient) -> None:
    for bad in ("Payments", "", "a" * 64):
        response = await client.get(URL, params=[("namespace", "default"), ("namespace", bad)])
        assert response.status_code == 400, bad
        assert set(response.json()) == {"error"}
        assert response.json()["error"].startswith("invalid query parameter namespace: ")


@pytest_asyncio.fixture
async def guarded(api_store: Store, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(api_store, Settings(data_dir=tmp_path, admin_token=ADMIN), poll_interval=0.05)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            yield http


async def test_the_admin_token_is_needed_when_configured(
    api_store: Store, guarded: httpx.AsyncClient
) -> None:
    make_stable(api_store, "app/x", {"n": 1})
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        refused = await guarded.get(URL, headers=headers)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert set(refused.json()) == {"error"}
    allowed = await guarded.get(URL, headers={"Authorization": f"Bearer {ADMIN}"})
    assert allowed.status_code == 200
    assert [c["path"] for c in allowed.json()["configs"]] == ["app/x"]
