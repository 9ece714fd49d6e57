"""Nothing the API accepted is lost to a store outage (issue 31): clients seen polling whose write
failed are kept for the next flush (the newest sighting wins, memory bounded, the excess counted
and logged), and a health report received while the store is down is kept and written once it is
back, with the time it was received; when too many wait, one is refused with 503 and
`Retry-After`, never accepted and then lost. tests/faults/test_api_store_outage.py cuts a real
store under real clients."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError
from starlette.applications import Starlette

from tempoconf.api.app import create_app
from tempoconf.api.health_reports import UnwrittenReports, flush_reports
from tempoconf.api.pending import PendingWrites
from tempoconf.api.seen import UnwrittenSeen, flush_seen_clients
from tempoconf.settings import Settings
from tempoconf.store import SeenClient, Store
from tests.api.helpers import make_stable, sample

PATH = "myproject/server_config"


class _OutageStore(Store):
    """A store whose client writes (seen clients, health reports) fail while `down`, as they do
    when the database refuses connections (the fault suite cuts a real one)."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise OperationalError("INSERT", {}, ConnectionRefusedError("connection refused"))

    def record_seen_clients(self, namespace: str, path: str, clients: list[SeenClient]) -> None:
        self._check()
        super().record_seen_clients(namespace, path, clients)

    def add_report(self, namespace: str, path: str, **fields: Any) -> None:  # type: ignore[override]
        self._check()
        super().add_report(namespace, path, **fields)


@pytest.fixture
def store(sqlite_url: str) -> Iterator[_OutageStore]:
    opened = _OutageStore(sqlite_url, migrate=True)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def outage_app(store: _OutageStore, tmp_path: Path) -> Starlette:
    # Flushes by hand only: the test says when.
    return create_app(
        store, Settings(data_dir=tmp_path), poll_interval=0.05, seen_flush_interval=3600
    )


@pytest.fixture
async def http(outage_app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with outage_app.router.lifespan_context(outage_app):
        transport = httpx.ASGITransport(app=outage_app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://tempoconf.test"
        ) as client:
            yield client


def recorded(store: Store) -> dict[str, str | None]:
    since = datetime.now(UTC) - timedelta(minutes=5)
    return {
        seen.client: seen.channel for seen in store.recent_clients("default", PATH, since=since)
    }


async def poll(http: httpx.AsyncClient, query: str) -> None:
    response = await http.get(f"/v1/configs/{PATH}?{query}")
    assert response.status_code == 200, response.text


async def test_clients_seen_while_the_store_is_down_are_written_once_it_is_back(
    outage_app: Starlette, store: _OutageStore, http: httpx.AsyncClient
) -> None:
    make_stable(store, PATH, {"v": 1})
    await outage_app.state.snapshot_cache.refresh()
    polls, metrics = outage_app.state.config_polls, outage_app.state.metrics
    unwritten: UnwrittenSeen = PendingWrites(100)
    store.down = True
    await poll(http, "client=host-1&channel=old")
    await poll(http, "client=host-2")
    assert await flush_seen_clients(polls, store, metrics, {}, unwritten) == 0
    assert len(unwritten) == 2
    await poll(http, "client=host-1&channel=new")  # a newer sighting of a kept client
    assert await flush_seen_clients(polls, store, metrics, {}, unwritten) == 0  # still down
    store.down = False
    assert await flush_seen_clients(polls, store, metrics, {}, unwritten) == 2
    assert recorded(store) == {"host-1": "new", "host-2": None}
    assert len(unwritten) == 0
    assert metrics.seen_clients_dropped == 0


async def test_clients_kept_are_bounded_and_the_oldest_dropped_counted_and_logged(
    outage_app: Starlette,
    store: _OutageStore,
    http: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_stable(store, PATH, {"v": 1})
    await outage_app.state.snapshot_cache.refresh()
    polls, metrics = outage_app.state.config_polls, outage_app.state.metrics
    unwritten: UnwrittenSeen = PendingWrites(2)
    store.down = True
    for name in ("host-1", "host-2"):
        await poll(http, f"client={name}")
    await flush_seen_clients(polls, store, metrics, {}, unwritten)
    for name in ("host-3", "host-4"):  # two more while down: host-1 and host-2 are the oldest
        await poll(http, f"client={name}")
    with caplog.at_level(logging.WARNING, logger="tempoconf.api.seen"):
        await flush_seen_clients(polls, store, metrics, {}, unwritten)
    dropped_lines = [r.getMessage() for r in caplog.records if "oldest clients" in r.getMessage()]
    assert dropped_lines == [
        "dropped the 2 oldest clients seen polling not written yet: more than 2 pending "
        "while the store is unreachable"
    ]
    store.down = False
    assert await flush_seen_clients(polls, store, metrics, {}, unwritten) == 2
    assert recorded(store) == {"host-3": None, "host-4": None}
    text = (await http.get("/metrics")).text
    assert sample(text, "tempoconf_api_seen_clients_dropped_total") == 2


def report(client: str, version: str) -> dict[str, object]:
    return {"path": PATH, "client": client, "version": version, "ok": 9, "failed": 1}


async def test_a_report_received_while_the_store_is_down_is_written_once_it_is_back(
    outage_app: Starlette, store: _OutageStore, http: httpx.AsyncClient
) -> None:
    version = make_stable(store, PATH, {"v": 1}).version
    await outage_app.state.snapshot_cache.refresh()
    unwritten: UnwrittenReports = outage_app.state.unwritten_reports
    store.down = True
    before = datetime.now(UTC)
    for name in ("host-1", "host-2"):
        response = await http.post("/v1/reports", json=report(name, version))
        assert response.status_code == 202, response.text
    received = datetime.now(UTC)
    assert await flush_reports(unwritten, store) == 0  # still down: kept
    store.down = False
    # While some wait, a new one queues behind them: written in the order received.
    assert (await http.post("/v1/reports", json=report("host-3", version))).status_code == 202
    assert store.report_totals("default", PATH, since=before) == []
    assert await flush_reports(unwritten, store) == 3
    totals = store.report_totals("default", PATH, since=before)
    assert sorted((row.client, row.ok, row.failed) for row in totals) == [
        ("host-1", 9, 1),
        ("host-2", 9, 1),
        ("host-3", 9, 1),
    ]
    # Stamped when received, not when written: the health checks judge the span they came in.
    later = store.report_totals("default", PATH, since=received)
    assert [row.client for row in later] == ["host-3"]
    assert len(unwritten.pending) == 0
    # Nothing waits now: the next report is written at once.
    assert (await http.post("/v1/reports", json=report("host-4", version))).status_code == 202
    assert len(store.report_totals("default", PATH, since=before)) == 4


async def test_a_report_is_refused_with_retry_after_when_too_many_wait_for_the_store(
    outage_app: Starlette, store: _OutageStore, http: httpx.AsyncClient
) -> None:
    version = make_stable(store, PATH, {"v": 1}).version
    await outage_app.state.snapshot_cache.refresh()
    unwritten = UnwrittenReports(PendingWrites(1))
    outage_app.state.unwritten_reports = unwritten
    store.down = True
    assert (await http.post("/v1/reports", json=report("host-1", version))).status_code == 202
    refused = await http.post("/v1/reports", json=report("host-2", version))
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "5"
    assert "send this one again later" in refused.json()["error"]
    store.down = False
    assert await flush_reports(unwritten, store) == 1
    assert (await http.post("/v1/reports", json=report("host-2", version))).status_code == 202
    since = datetime.now(UTC) - timedelta(minutes=5)
    assert sorted(row.client for row in store.report_totals("default", PATH, since=since)) == [
        "host-1",
        "host-2",
    ]
