"""A report's latency (`latency_count`, `latency_sum_ms`): stored by POST /v1/reports and summed
per client by report_totals, refused by name when half there or not a finite count and sum, and
added up by an edge's relay when it merges reports."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from tempoconf.api.edge_reports import ReportRelay
from tempoconf.api.routes.reports import ReportBody
from tempoconf.api.snapshots import SnapshotCache
from tempoconf.store.store import Store
from tests.api.helpers import make_stable

PATH = "myproject/server_config"


def report(version: str, **fields: Any) -> dict[str, Any]:
    return {"path": PATH, "client": "host-1", "version": version, "ok": 10, "failed": 0, **fields}


def latency_of(store: Store, since: datetime) -> dict[str, tuple[int, float, int, int]]:
    """Per client: its summed latency_count, latency_sum_ms, ok and reports."""
    return {
        row.client: (row.latency_count, row.latency_sum_ms, row.ok, row.reports)
        for row in store.report_totals("default", PATH, since=since)
    }


async def test_latency_figures_are_stored_and_summed_per_client(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    version = make_stable(api_store, PATH, {"v": 1}).version
    since = datetime.now(UTC) - timedelta(minutes=1)
    bodies = [
        report(version, client="c-1", latency_count=10, latency_sum_ms=123.25),
        report(version, client="c-1", ok=5, latency_count=5, latency_sum_ms=7),  # an int sum
        report(version, client="c-1", ok=1),  # timed nothing this time
        report(version, client="c-2", latency_count=None, latency_sum_ms=None),  # null: absent
        # latency only, no operation counted ok or failed: stored as any report
        report(version, client="c-3", ok=0, latency_count=2, latency_sum_ms=0.5),
        # an apply report with latency is a health report too
        report(version, client="c-4", ok=0, applied=True, latency_count=1, latency_sum_ms=3.0),
        report(version, client="c-5", latency_count=0, latency_sum_ms=0),  # nothing timed
    ]

    answers = [await client.post("/v1/reports", json=body) for body in bodies]

    assert [(a.status_code, a.json()) for a in answers] == [(202, {"accepted": True})] * 7
    assert latency_of(api_store, since) == {
        "c-1": (15, 130.25, 16, 3),
        "c-2": (0, 0.0, 10, 1),
        "c-3": (2, 0.5, 0, 1),
        "c-4": (1, 3.0, 0, 1),
        "c-5": (0, 0.0, 10, 1),
    }


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"latency_count": 3}, "latency_count needs latency_sum_ms"),
        ({"latency_sum_ms": 12.5}, "latency_sum_ms needs latency_count"),
        ({"latency_count": 3, "latency_sum_ms": None}, "latency_count needs latency_sum_ms"),
        ({"latency_count": 0, "latency_sum_ms": 5.0}, "latency_sum_ms is 5.0 with latency_count 0"),
        ({"latency_count": -1, "latency_sum_ms": 1.0}, "/latency_count:"),
        ({"latency_count": 1.5, "latency_sum_ms": 1.0}, "/latency_count:"),
        ({"latency_count": "3", "latency_sum_ms": 1.0}, "/latency_count:"),
        ({"latency_count": 10**13, "latency_sum_ms": 1.0}, "/latency_count:"),
        ({"latency_count": 1, "latency_sum_ms": -0.5}, "/latency_sum_ms:"),
        ({"latency_count": 1, "latency_sum_ms": "NaN"}, "/latency_sum_ms:"),
        ({"latency_count": 1, "latency_sum_ms": "Infinity"}, "/latency_sum_ms:"),
        ({"latency_count": 1, "latency_sum_ms": "12.5"}, "/latency_sum_ms:"),
        ({"latency_count": 1, "latency_sum_ms": True}, "/latency_sum_ms:"),
        ({"latency_count": 1, "latency_sum_ms": 1e16}, "/latency_sum_ms:"),
    ],
)
async def test_bad_latency_figures_are_400_naming_the_field_and_not_stored(
    fields: dict[str, Any], words: str, api_store: Store, client: httpx.AsyncClient
) -> None:
    version = make_stable(api_store, PATH, {"v": 1}).version
    since = datetime.now(UTC) - timedelta(minutes=1)

    response = await client.post("/v1/reports", json=report(version, **fields))

    assert response.status_code == 400, response.text
    assert words in response.json()["error"], response.text
    assert api_store.report_totals("default", PATH, since=since) == []


async def test_a_bare_nan_or_infinity_in_the_body_is_refused(
    api_store: Store, client: httpx.AsyncClient
) -> None:
    version = make_stable(api_store, PATH, {"v": 1}).version
    for constant in ("NaN", "Infinity", "-Infinity"):
        text = json.dumps(report(version, latency_count=1)).replace("}", "")
        response = await client.post(
            "/v1/reports",
            content=f'{text}, "latency_sum_ms": {constant}}}',
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text
        assert f"{constant} is not a JSON number" in response.json()["error"]


async def test_an_edge_relay_adds_up_the_latency_of_the_reports_it_merges(
    api_store: Store, app: Starlette
) -> None:
    """The relay forwards to a real origin app; what it sent is read off the wire."""
    version = make_stable(api_store, PATH, {"v": 1}).version
    since = datetime.now(UTC) - timedelta(minutes=1)
    sent: list[dict[str, Any]] = []

    async def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    def queued(**fields: Any) -> dict[str, Any]:
        # as the edge's route queues a report: validated, nulls left out
        body = ReportBody.model_validate(report(version, **fields))
        return body.model_dump(mode="json", exclude_none=True)

    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://origin.test",
            event_hooks={"request": [record]},
        ) as http:
            relay = ReportRelay(http, interval=3600)
            for fields in (
                {"client": "c-1", "ok": 5, "latency_count": 5, "latency_sum_ms": 50.5},
                {"client": "c-1", "ok": 3},  # no latency: adds nothing to it
                {"client": "c-1", "ok": 2, "latency_count": 2, "latency_sum_ms": 1.5},
                {"client": "c-2", "ok": 1},
                {"client": "c-2", "ok": 1},  # neither has latency: the merged one has none
                {"client": "c-3", "ok": 1},  # first without, then with: the merged one has it
                {"client": "c-3", "ok": 1, "latency_count": 1, "latency_sum_ms": 2.0},
            ):
                assert relay.add(queued(**fields))
            assert relay.pending == 3
            assert await relay.flush()

    assert relay.counts.forwarded == 3
    latency_sent = {
        body["client"]: {key: value for key, value in body.items() if key.startswith("latency")}
        for body in sent
    }
    assert latency_sent == {
        "c-1": {"latency_count": 7, "latency_sum_ms": 52.0},
        "c-2": {},
        "c-3": {"latency_count": 1, "latency_sum_ms": 2.0},
    }
    assert latency_of(api_store, since) == {
        "c-1": (7, 52.0, 10, 1),
        "c-2": (0, 0.0, 2, 1),
        "c-3": (1, 2.0, 2, 1),
    }
