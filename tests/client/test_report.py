"""`report()`: a health report for the version in use, POSTed to the live API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tempoconf.client import AsyncConfigClient, ConfigClient, ConfigUnavailableError
from tests.client.helpers import PATH, stable_served
from tests.client.live_api import LiveApi
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
