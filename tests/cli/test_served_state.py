"""`served_state` answers the same ServedState in either mode: the direct mode reads the store,
the API mode decodes `GET /v1/admin/configs` (the API in-process over the same store)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx

from tempoconf.api.app import create_app
from tempoconf.canonical import version_id
from tempoconf.cli._api_backend import ApiBackend
from tempoconf.cli._backend import DirectBackend
from tempoconf.resolution import VersionRecord
from tempoconf.settings import Settings
from tempoconf.store.store import Store

ADMIN = "admin-secret"


def put(store: Store, namespace: str, path: str, value: object) -> str:
    version = version_id(value)
    store.put_version(namespace, path, VersionRecord(version, value))
    return version


async def test_the_direct_and_the_api_mode_answer_the_same_served_state(
    store: Store, database_url: str, tmp_path: Path
) -> None:
    stable = put(store, "default", "app/web", {"n": 1})
    store.set_stable("default", "app/web", stable, actor="t", reason="", event_key="stable")
    store.set_schema("default", "app/web", {"type": "object"}, actor="t")
    store.set_schema("payments", "app/schema-only", {"type": "object"}, actor="t")
    staged = put(store, "payments", "app/locked", {"n": 2})
    store.acquire_locks({("payments", "app/locked"): staged}, workflow_id="w", run_id="r")
    store.start_freeze("payments", reason="black friday", by="alice")
    store.start_freeze("search", reason="over", by="bob")
    store.end_freeze("search", by="bob")
    settings = Settings(
        data_dir=tmp_path,
        database_url=database_url,
        api_url="http://tempoconf.test",
        admin_token=ADMIN,
    )
    app = create_app(store, settings, poll_interval=0.05)

    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url=settings.resolved_api_url,
            headers={"Authorization": f"Bearer {ADMIN}"},
        ) as http:
            api = ApiBackend(settings, http, "TEMPOCONF_ADMIN_TOKEN")
            with ExitStack() as stack:
                direct = DirectBackend(settings, stack)
                for namespaces in (None, ["payments"], ["search", "default"], ["nowhere"], []):
                    through_api = await api.served_state(namespaces)
                    assert through_api == await direct.served_state(namespaces), namespaces

                every = await api.served_state(None)
    assert [(c.namespace, c.path) for c in every.configs] == [
        ("default", "app/web"),
        ("payments", "app/locked"),
        ("payments", "app/schema-only"),
    ]
    lock = every.configs[1].lock
    assert lock is not None and (lock.namespace, lock.path, lock.version) == (
        "payments",
        "app/locked",
        staged,
    )
    assert [(f.namespace, f.reason) for f in every.freezes] == [("payments", "black friday")]
