"""/metrics: polls by namespace, path, stage and code; versions served per stage; request latency
by route template; the registry is the app's own."""

from __future__ import annotations

import httpx
from prometheus_client import REGISTRY
from starlette.applications import Starlette

from tempoconf.api.app import create_app
from tempoconf.api.snapshots import SnapshotCache
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable, publish, sample, start_rollout

PATH = "myproject/server_config"
URL = f"/v1/configs/{PATH}"


async def test_polls_served_versions_and_latency(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, {"v": 1})
    staged = start_rollout(api_store, PATH, {"v": 2})
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    await cache.refresh()

    first = await client.get(URL, params={"client": "h"})
    await client.get(URL, params={"client": "h"}, headers={"If-None-Match": first.headers["etag"]})
    await client.get(URL, params={"client": "h", "channel": "canary"})
    await client.get("/v1/configs/unknown/config")
    await client.get(URL, params={"stable": "maybe"})
    await client.get(f"/v1/admin/versions/{PATH}")
    text = (await client.get("/metrics")).text

    def polls(**labels: str) -> float | None:
        return sample(text, "tempoconf_api_polls_total", **labels)

    config = {"namespace": "default", "path": PATH}
    assert polls(**config, stage="stable", code="200") == 1
    assert polls(**config, stage="stable", code="304") == 1
    assert polls(**config, stage="channel:canary", code="200") == 1
    # Unknown or invalid names never become label values.
    assert polls(namespace="", path="", stage="", code="404") == 1
    assert polls(namespace="", path="", stage="", code="400") == 1
    served = "tempoconf_api_served_version"
    assert sample(text, served, **config, stage="stable", version=stable.version) == 1
    assert sample(text, served, **config, stage="channel:canary", version=staged.version) == 1
    assert sample(text, "tempoconf_api_long_polls_waiting") == 0
    assert sample(text, "tempoconf_api_snapshot_revision") == api_store.revision()
    latency = "tempoconf_api_request_duration_seconds_count"
    assert sample(text, latency, method="GET", route="/v1/configs/{path}") == 5
    assert sample(text, latency, method="GET", route="/v1/admin/versions/{path}") == 1
    assert "/v1/admin/versions/myproject" not in text  # templates, never raw paths


async def test_each_app_has_its_own_registry(
    app: Starlette, api_store: Store, settings: Settings
) -> None:
    other = create_app(api_store, settings)

    assert app.state.metrics.registry is not other.state.metrics.registry
    assert app.state.metrics.registry is not REGISTRY


async def test_report_series_of_versions_no_longer_served_are_dropped(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    first = make_stable(api_store, PATH, {"v": 1})
    await cache.refresh()
    report = {"path": PATH, "client": "h", "version": first.version, "ok": 5, "failed": 1}
    assert (await client.post("/v1/reports", json=report)).status_code == 202
    second = start_rollout(api_store, PATH, {"v": 2})
    await cache.refresh()
    report = {**report, "version": second.version}
    assert (await client.post("/v1/reports", json=report)).status_code == 202
    before = (await client.get("/metrics")).text

    # A new rollout's version becomes stable; the old one is neither stable nor staged now.
    api_store.promote(
        "default",
        PATH,
        run_id="run-1",
        workflow_id=f"rollout:default/{PATH}",
        version=second.version,
        actor="tests",
        reason="done",
        event_key="promote-1",
    )
    await cache.refresh()
    after = (await client.get("/metrics")).text

    old = {"namespace": "default", "path": PATH, "version": first.version}
    new = {**old, "version": second.version}
    assert sample(before, "tempoconf_reports_total", **old) == 1
    assert sample(after, "tempoconf_reports_total", **old) is None
    assert sample(after, "tempoconf_client_operations_total", **old, result="ok") is None
    assert sample(after, "tempoconf_reports_total", **new) == 1
    assert sample(after, "tempoconf_client_operations_total", **new, result="failed") == 1
