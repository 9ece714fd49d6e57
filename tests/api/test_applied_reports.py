"""`POST /v1/reports` with `applied`: queued in memory, written in batches to the store, listed
by `GET /v1/admin/clients/{path}?version=V&not_applied=true`; bad input refused by field."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette

from tempoconf.api.applied import flush_applied
from tempoconf.store import Store
from tests.api.helpers import make_stable

PATH = "myproject/server_config"


def body(client: str, version: str, **extra: object) -> dict[str, object]:
    return {"path": PATH, "client": client, "version": version, "ok": 0, "failed": 0, **extra}


async def test_apply_reports_are_batched_into_the_store_and_listed_by_version(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    old = make_stable(api_store, PATH, {"v": 1}).version
    new = make_stable(api_store, PATH, {"v": 2}).version
    await app.state.snapshot_cache.refresh()
    for report in (
        body("host-1", new, applied=True, channel="canary"),
        body("host-2", old, applied=True),
        body("host-2", new, applied=False, apply_error="reload: exit 3"),
        body("host-3", old, applied=True),
        # an apply report may carry health figures: both are kept
        body("host-4", new, applied=True, ok=5, failed=1),
    ):
        response = await client.post("/v1/reports", json=report)
        assert response.status_code == 202, response.text
    assert api_store.applied_states("default", PATH) == []  # not written until the flush
    assert await flush_applied(app.state.pending_applied, api_store) == 5

    states = {state.client: state for state in api_store.applied_states("default", PATH)}
    assert (states["host-2"].version, states["host-2"].error) == (old, "reload: exit 3")
    assert states["host-1"].channel == "canary"
    # only host-4's report had operations: the 0/0 apply reports are no health reports
    totals = api_store.report_totals(
        "default", PATH, since=states["host-1"].reported_at.replace(year=2000)
    )
    assert [(row.client, row.ok, row.failed) for row in totals] == [("host-4", 5, 1)]

    listed = await client.get(
        f"/v1/admin/clients/{PATH}", params={"version": new, "not_applied": "true"}
    )
    assert listed.status_code == 200, listed.text
    rows = listed.json()["clients"]
    assert [row["client"] for row in rows] == ["host-2"]
    assert rows[0]["applied_version"] == old and rows[0]["apply_error"] == "reload: exit 3"
    assert rows[0]["apply_error_version"] == new
    on_new = await client.get(f"/v1/admin/clients/{PATH}", params={"version": new})
    assert [row["client"] for row in on_new.json()["clients"]] == ["host-1", "host-2", "host-4"]
    everyone = await client.get(f"/v1/admin/clients/{PATH}")
    assert len(everyone.json()["clients"]) == 4


async def test_bad_apply_fields_are_refused_by_name(
    api_store: Store, client: httpx.AsyncClient, app: Starlette
) -> None:
    version = make_stable(api_store, PATH, {"v": 1}).version
    await app.state.snapshot_cache.refresh()
    for extra, words in (
        ({"applied": "yes"}, "/applied"),
        ({"applied": True, "apply_error": "x"}, "apply_error only with applied: false"),
        ({"applied": False, "apply_error": "x" * 1001}, "/apply_error"),
        ({"applied": False, "apply_error": "nul\u0000"}, "/apply_error"),
    ):
        response = await client.post("/v1/reports", json=body("host-1", version, **extra))
        assert response.status_code == 400, (extra, response.text)
        assert words in response.text, (extra, response.text)
    assert app.state.pending_applied.snapshot() == {}  # nothing half-recorded
    for params, words in (
        ({"not_applied": "true"}, "needs version=V"),
        ({"version": "zz"}, "16-hex version id"),
        ({"version": version, "not_applied": "maybe"}, "expected true or false"),
        ({"version": version, "not_applied": ""}, "expected true or false"),
    ):
        response = await client.get(f"/v1/admin/clients/{PATH}", params=params)
        assert response.status_code == 400 and words in response.text, response.text


class _DownStore(Store):
    """A store whose apply writes fail while `down` (an outage of the database)."""

    down = True

    def record_applied(self, namespace: str, path: str, reports: list) -> None:  # type: ignore[override, type-arg]
        if self.down:
            raise ConnectionError("connection refused")
        super().record_applied(namespace, path, reports)


async def test_apply_reports_survive_a_store_outage_and_a_flood_is_bounded(
    api_database_url: str,
) -> None:
    from datetime import UTC, datetime

    from tempoconf.api.applied import PendingApplied
    from tempoconf.store import AppliedReport

    store = _DownStore(api_database_url, migrate=True)
    try:
        pending = PendingApplied(limit=3)
        at = datetime.now(UTC)
        for number in range(4):
            pending.add_report("default", PATH, AppliedReport(f"host-{number}", "a" * 16, at))
        assert pending.dropped == 1  # the oldest: host-0
        assert await flush_applied(pending, store) == 0  # down: kept for the next flush
        store.down = False
        assert await flush_applied(pending, store) == 3
        assert [s.client for s in store.applied_states("default", PATH)] == [
            "host-1",
            "host-2",
            "host-3",
        ]
        assert await flush_applied(pending, store) == 0  # written once, then forgotten
    finally:
        store.close()
