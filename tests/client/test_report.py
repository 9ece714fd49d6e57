"""`report()`: a health report for the version in use, POSTed to the live API."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

import tempoconf.api.health_reports
import tempoconf.api.routes.reports
from tempoconf.client import AsyncConfigClient, ConfigClient, ConfigUnavailableError
from tempoconf.client._core import REPORT_ATTEMPTS, report_resend_after
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import sample
from tests.client.helpers import PATH, stable_served
from tests.client.live_api import LiveApi, running_api
from tests.fixtures.waiting import eventually_sync
from tests.store.helpers import last_report_error, report_sums

SINCE = datetime.now(UTC) - timedelta(days=1)


def test_report_posts_for_the_version_in_use(live_api: LiveApi) -> None:
    stable = stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1")
    try:
        assert client.get().version == stable.version
        client.report(ok=98, failed=2, error="timeout talking to db")
        client.report(ok=10, failed=0)
    finally:
        client.close()

    stats = report_sums(live_api.store, "default", PATH, stable.version, since=SINCE)
    assert (stats.clients, stats.reports, stats.ok, stats.failed) == (1, 2, 108, 2)
    assert last_report_error(live_api.store, "default", PATH) == "timeout talking to db"
    # Without channel and labels, the report still names its identity: none of either.
    [totals] = live_api.store.report_totals("default", PATH, since=SINCE)
    assert (totals.channel, totals.labels) == (None, {})


def test_a_report_names_the_identity_the_client_polls_with(live_api: LiveApi) -> None:
    """So the health check counts it for the cohort this client is in."""
    stable_served(live_api, {"v": 1})
    client = ConfigClient(
        live_api.url, PATH, client_id="h2", channel="canary", labels={"region": "eu"}
    )
    try:
        client.get()
        client.report(ok=1, failed=0)
    finally:
        client.close()

    [totals] = live_api.store.report_totals("default", PATH, since=SINCE)
    assert (totals.client, totals.channel, totals.labels) == ("h2", "canary", {"region": "eu"})


async def test_async_report(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": 1})
    client = AsyncConfigClient(live_api.url, PATH, client_id="h1")
    try:
        await client.get()
        await client.report(ok=5, failed=1)
    finally:
        await client.aclose()
    [totals] = live_api.store.report_totals("default", PATH, since=SINCE)
    assert (totals.ok, totals.failed, totals.channel, totals.labels) == (5, 1, None, {})


def test_a_report_carries_the_latency_when_given(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1")
    try:
        client.get()
        client.report(ok=8, failed=2, latency_count=10, latency_sum_ms=152.5)
        client.report(ok=4, failed=0, latency_count=4, latency_sum_ms=10)  # an int sum
        client.report(ok=1, failed=0)  # without: adds nothing to the latency
    finally:
        client.close()
    [totals] = live_api.store.report_totals("default", PATH, since=SINCE)
    assert (totals.ok, totals.failed, totals.reports) == (13, 2, 3)
    assert (totals.latency_count, totals.latency_sum_ms) == (14, 162.5)


async def test_async_report_with_latency(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": 1})
    client = AsyncConfigClient(live_api.url, PATH, client_id="h1")
    try:
        await client.get()
        await client.report(5, 1, "slow db", latency_count=6, latency_sum_ms=0.75)
    finally:
        await client.aclose()
    [totals] = live_api.store.report_totals("default", PATH, since=SINCE)
    assert (totals.ok, totals.latency_count, totals.latency_sum_ms) == (5, 6, 0.75)


def test_report_checks_its_latency_before_sending(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1")
    try:
        client.get()
        for latency, words in (
            ({"latency_count": 3}, "latency_count needs latency_sum_ms"),
            ({"latency_sum_ms": 3.0}, "latency_sum_ms needs latency_count"),
            ({"latency_count": -1, "latency_sum_ms": 1.0}, "latency_count must be a count"),
            ({"latency_count": True, "latency_sum_ms": 1.0}, "latency_count must be a count"),
            ({"latency_count": 1, "latency_sum_ms": -1.0}, "latency_sum_ms must be a finite"),
            (
                {"latency_count": 1, "latency_sum_ms": float("nan")},
                "latency_sum_ms must be a finite",
            ),
            ({"latency_count": 1, "latency_sum_ms": "12"}, "latency_sum_ms must be a finite"),
            ({"latency_count": 0, "latency_sum_ms": 4.0}, "with latency_count 0"),
        ):
            with pytest.raises(ValueError, match=words):
                client.report(ok=1, failed=0, **latency)  # type: ignore[arg-type]
    finally:
        client.close()
    assert live_api.store.report_totals("default", PATH, since=SINCE) == []


def test_report_checks_its_input(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="h1")
    try:
        with pytest.raises(ConfigUnavailableError, match="no value in use"):
            client.report(ok=1, failed=0)
        client.get()
        with pytest.raises(ValueError, match="ok must be a count"):
            client.report(ok=-1, failed=0)
        with pytest.raises(ValueError, match="failed must be a count"):
            client.report(ok=1, failed=True)
    finally:
        client.close()


# -- a report refused while the API's store is down -------------------------------------------


def _report_posts(api: LiveApi) -> float:
    """How many POST /v1/reports the API has answered (its own latency histogram's count)."""
    text = httpx.get(f"{api.url}/metrics", timeout=5).text
    count = sample(
        text, "tempoconf_api_request_duration_seconds_count", method="POST", route="/v1/reports"
    )
    return count or 0.0


@contextmanager
def _store_cut_until_a_report_is_refused(api: LiveApi, sqlite_url: str) -> Iterator[None]:
    """Lock the API's SQLite store (another connection's exclusive transaction: its writes fail
    after their busy timeout); unlock it once the API has answered one report, so that what the
    store gets is the client's second attempt."""
    holder = sqlite3.connect(
        make_url(sqlite_url).database or "", isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN EXCLUSIVE")

    def unlock_after_the_first_answer() -> None:
        try:
            eventually_sync(
                lambda: _report_posts(api) >= 1, what="the API to answer a report", timeout=60
            )
        finally:
            holder.execute("ROLLBACK")

    unlocker = threading.Thread(target=unlock_after_the_first_answer, daemon=True)
    unlocker.start()
    try:
        yield
    finally:
        unlocker.join(timeout=70)
        holder.close()


@pytest.fixture
def refusing_api(
    sqlite_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveApi]:
    """A live API that keeps no report for later: with its store down, every report is refused
    with 503 and `Retry-After: 1` (as when too many wait for the store)."""
    monkeypatch.setattr(tempoconf.api.health_reports, "MAX_UNWRITTEN_REPORTS", 0)
    monkeypatch.setattr(tempoconf.api.routes.reports, "REPORT_RETRY_AFTER_SECONDS", 1)
    with running_api(sqlite_store, Settings(data_dir=tmp_path / "api")) as api:
        yield api


def test_a_report_refused_while_the_store_is_down_is_sent_again_after_retry_after(
    refusing_api: LiveApi, sqlite_url: str
) -> None:
    stable = stable_served(refusing_api, {"v": 1})
    client = ConfigClient(refusing_api.url, PATH, client_id="h1")
    try:
        client.get()
        with _store_cut_until_a_report_is_refused(refusing_api, sqlite_url):
            client.report(ok=7, failed=1)
    finally:
        client.close()
    assert _report_posts(refusing_api) == 2  # refused with 503, then accepted
    stats = report_sums(refusing_api.store, "default", PATH, stable.version, since=SINCE)
    assert (stats.clients, stats.reports, stats.ok, stats.failed) == (1, 1, 7, 1)


async def test_an_async_report_refused_while_the_store_is_down_is_sent_again(
    refusing_api: LiveApi, sqlite_url: str
) -> None:
    """The agent reports through the async client: the same resend."""
    stable = stable_served(refusing_api, {"v": 1})
    client = AsyncConfigClient(refusing_api.url, PATH, client_id="h1")
    try:
        await client.get()
        with _store_cut_until_a_report_is_refused(refusing_api, sqlite_url):
            await client.report(ok=3, failed=0)
    finally:
        await client.aclose()
    assert _report_posts(refusing_api) == 2
    stats = report_sums(refusing_api.store, "default", PATH, stable.version, since=SINCE)
    assert (stats.reports, stats.ok) == (1, 3)


def test_a_report_is_sent_again_only_after_a_503_with_retry_after_and_a_few_times() -> None:
    assert report_resend_after(503, {"retry-after": "2"}, attempt=1) == 2.0
    assert report_resend_after(503, {"retry-after": "2"}, attempt=REPORT_ATTEMPTS - 1) == 2.0
    assert report_resend_after(503, {"retry-after": "2"}, attempt=REPORT_ATTEMPTS) is None
    assert report_resend_after(503, {}, attempt=1) is None  # no Retry-After: not ours to guess
    assert report_resend_after(500, {"retry-after": "2"}, attempt=1) is None
    assert report_resend_after(503, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 1) is None
    assert report_resend_after(503, {"retry-after": "3600"}, attempt=1) == 30.0  # bounded
