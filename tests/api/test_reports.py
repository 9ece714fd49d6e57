"""POST /v1/reports: stored for the health checks (report_totals) and counted in /metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tempoconf.api.snapshots import SnapshotCache
from tempoconf.store.store import Store
from tests.api.helpers import make_stable, sample, start_rollout
from tests.store.helpers import ReportSums, last_report_error, report_sums

PATH = "myproject/server_config"


def report(version: str, **fields: Any) -> dict[str, Any]:
    return {"path": PATH, "client": "host-1", "version": version, "ok": 10, "failed": 0, **fields}


async def test_reports_are_stored_and_counted(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, {"v": 1})
    staged = start_rollout(api_store, PATH, {"v": 2})
    since = datetime.now(UTC) - timedelta(minutes=1)

    answers = [
        await client.post(
            "/v1/reports",
            json=report(
                staged.version, client="c-1", ok=90, failed=10, error="timeout talking to db"
            ),
        ),
        await client.post(
            "/v1/reports",
            json=report(staged.version, client="c-2", ok=100, namespace="default", error=None),
        ),
        await client.post(
            "/v1/reports",
            json=report(stable.version, client="h-1", ok=50, failed=1, extra_field="ignored"),
        ),
    ]

    assert [(a.status_code, a.json()) for a in answers] == [(202, {"accepted": True})] * 3
    assert report_sums(api_store, "default", PATH, staged.version, since=since) == ReportSums(
        clients=2, ok=190, failed=10, reports=2
    )
    assert last_report_error(api_store, "default", PATH) == "timeout talking to db"
    baseline = report_sums(
        api_store, "default", PATH, staged.version, since=since, exclude_version=True
    )
    assert (baseline.clients, baseline.ok, baseline.failed) == (1, 50, 1)

    text = (await client.get("/metrics")).text
    new = {"namespace": "default", "path": PATH, "version": staged.version}
    old = {**new, "version": stable.version}
    assert sample(text, "tempoconf_reports_total", **new) == 2
    assert sample(text, "tempoconf_client_operations_total", **new, result="ok") == 190
    assert sample(text, "tempoconf_client_operations_total", **new, result="failed") == 10
    assert sample(text, "tempoconf_reports_total", **old) == 1
    assert sample(text, "tempoconf_client_operations_total", **old, result="failed") == 1


async def test_a_report_on_an_unknown_config_or_version_is_404_and_not_stored(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, {"v": 1})
    since = datetime.now(UTC) - timedelta(minutes=1)

    unknown_version = await client.post("/v1/reports", json=report("ffffffffffffffff"))
    unknown_config = await client.post(
        "/v1/reports", json={**report(stable.version), "path": "other/config"}
    )
    other_namespace = await client.post(
        "/v1/reports", json=report(stable.version, namespace="team")
    )

    assert [r.status_code for r in (unknown_version, unknown_config, other_namespace)] == [404] * 3
    assert "has no version 'ffffffffffffffff'" in unknown_version.json()["error"]
    assert report_sums(api_store, "default", PATH, "ffffffffffffffff", since=since).reports == 0
    assert "tempoconf_reports_total{" not in (await client.get("/metrics")).text


async def test_a_version_stored_after_the_last_refresh_is_accepted(
    api_store: Store, settings: Any, tmp_path: Any
) -> None:
    from tempoconf.api.app import create_app

    app = create_app(api_store, settings, poll_interval=3600)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            stable = make_stable(api_store, PATH, {"v": 1})  # the cache does not know it yet
            response = await http.post("/v1/reports", json=report(stable.version))
    assert response.status_code == 202


async def test_a_report_keeps_the_identity_it_names(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, {"v": 1})
    since = datetime.now(UTC) - timedelta(minutes=1)

    answers = [
        await client.post(
            "/v1/reports",
            json=report(
                stable.version,
                client="c-1",
                channel="canary",
                labels={"region": "eu", "tier": "a=b"},
            ),
        ),
        await client.post("/v1/reports", json=report(stable.version, client="c-2", labels={})),
        await client.post(
            "/v1/reports", json=report(stable.version, client="c-3", channel=None, labels=None)
        ),
    ]

    assert [a.status_code for a in answers] == [202] * 3
    identities = {
        row.client: (row.channel, row.labels)
        for row in api_store.report_totals("default", PATH, since=since)
    }
    assert identities == {
        "c-1": ("canary", {"region": "eu", "tier": "a=b"}),
        "c-2": (None, {}),  # named: no channel, no labels
        "c-3": (None, None),  # named none: the health check falls back to its polls
    }


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        (
            {"client": "h", "version": "v", "ok": 1, "failed": 0},
            ["/path: required field is missing"],
        ),
        (
            {"path": PATH, "client": "", "version": "v", "ok": -1, "failed": "3"},
            ["/client:", "/ok:", "/failed:"],
        ),
        ({"path": PATH, "client": "h", "version": "v", "ok": 1.5, "failed": 0}, ["/ok:"]),
        ({"path": PATH, "client": "h", "version": "v", "ok": True, "failed": 0}, ["/ok:"]),
        ({"path": "Bad//Path", "client": "h", "version": "v", "ok": 1, "failed": 0}, ["/path:"]),
        (
            {"path": PATH, "namespace": "A B", "client": "h", "version": "v", "ok": 1, "failed": 0},
            ["/namespace:"],
        ),
        (
            {
                "path": PATH,
                "client": "h",
                "version": "v",
                "ok": 1,
                "failed": 0,
                "error": "x" * 1001,
            },
            ["/error:"],
        ),
        ({"path": PATH, "client": "h", "version": "v", "ok": 10**13, "failed": 0}, ["/ok:"]),
        (
            {
                "path": PATH,
                "client": "h",
                "version": "v",
                "ok": 1,
                "failed": 0,
                "channel": "",
                "labels": {"region": 1},
            },
            ["/channel:", "/labels/region:"],
        ),
        (
            {
                "path": PATH,
                "client": "h",
                "version": "v",
                "ok": 1,
                "failed": 0,
                "labels": {"a=b": "c"},
            },
            ["/labels:", "label key 'a=b' must be 1-255 characters without '='"],
        ),
        (
            {
                "path": PATH,
                "client": "h",
                "version": "v",
                "ok": 1,
                "failed": 0,
                "labels": ["region=eu"],
            },
            ["/labels:"],
        ),
        (
            {
                "path": PATH,
                "client": "h",
                "version": "v",
                "ok": 1,
                "failed": 0,
                "labels": {str(n): "x" for n in range(65)},
            },
            ["/labels:"],
        ),
        ([1, 2], ["a JSON object, not an array"]),
    ],
)
async def test_invalid_reports_are_400_listing_every_field(
    body: Any, fragments: list[str], client: httpx.AsyncClient
) -> None:
    response = await client.post("/v1/reports", json=body)

    assert response.status_code == 400, response.text
    for fragment in fragments:
        assert fragment in response.json()["error"]
    assert response.json()["problems"]
