"""The OpenFeature provider's asyncio flavour through the OpenFeature SDK, against a live API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from openfeature import api
from openfeature.event import ProviderEvent
from openfeature.exception import ErrorCode, ProviderNotReadyError
from openfeature.flag_evaluation import Reason
from openfeature.provider import ProviderStatus

from tempoconf.client.openfeature import AsyncTempoconfProvider
from tests.api.helpers import publish, start_rollout
from tests.client.helpers import PATH, promote, stable_served
from tests.client.live_api import LiveApi
from tests.client.openfeature_helpers import openfeature_events
from tests.fixtures.waiting import eventually

FAST = {
    "poll_interval": 0.1,
    "min_interval": 0.05,
    "backoff_base": 0.05,
    "backoff_cap": 0.2,
    "timeout": 2,
}
STABLE = {"checkout": {"new_flow": False}, "max_connections": 1000, "name": "blue"}
STAGED = {**STABLE, "checkout": {"new_flow": True}, "max_connections": 2000}
FLOW = f"{PATH}#/checkout/new_flow"
MAX = f"{PATH}#/max_connections"

READY = ProviderEvent.PROVIDER_READY
STALE = ProviderEvent.PROVIDER_STALE
ERROR = ProviderEvent.PROVIDER_ERROR
CHANGED = ProviderEvent.PROVIDER_CONFIGURATION_CHANGED


async def test_async_canary_promotion_and_outage(live_api: LiveApi, cache_dir: Path) -> None:
    stable = await asyncio.to_thread(stable_served, live_api, STABLE)
    staged = await asyncio.to_thread(start_rollout, live_api.store, PATH, STAGED)
    await asyncio.to_thread(
        publish, live_api.store, PATH, index=0, name="channel:canary", channel="canary"
    )
    await asyncio.to_thread(live_api.wait_served, PATH, staged.version, channel="canary")

    with openfeature_events() as events:
        async with (
            AsyncTempoconfProvider(
                live_api.url, [PATH], client_id="h1", channel="canary", cache_dir=cache_dir, **FAST
            ) as canary_provider,
            AsyncTempoconfProvider(live_api.url, [PATH], client_id="h2", **FAST) as other_provider,
        ):
            api.set_provider_and_wait(canary_provider, "canary")  # initialize() does no I/O
            api.set_provider_and_wait(other_provider, "other")
            canary, other = api.get_client("canary"), api.get_client("other")

            on_canary = await canary.get_integer_details_async(MAX, 0)
            assert (on_canary.value, on_canary.reason, on_canary.variant) == (
                2000,
                Reason.TARGETING_MATCH,
                staged.version,
            )
            on_other = await other.get_integer_details_async(MAX, 0)
            assert (on_other.value, on_other.reason, on_other.variant) == (
                1000,
                Reason.STATIC,
                stable.version,
            )
            assert await other.get_boolean_value_async(FLOW, True) is False

            # The promotion moves the other host (the canary keeps its version: no event).
            await asyncio.to_thread(promote, live_api.store, staged.version)
            changes = await eventually(lambda: events.of(CHANGED), what="CONFIGURATION_CHANGED")
            assert [change.flags_changed for change in changes] == [[PATH, MAX, FLOW]]
            promoted = await other.get_integer_details_async(MAX, 0)
            assert (promoted.value, promoted.reason) == (2000, Reason.STATIC)

            # The API stops: the canary host serves its last good value, STALE; back: READY.
            await asyncio.to_thread(live_api.stop)
            await eventually(
                lambda: canary.get_provider_status() == ProviderStatus.STALE, what="status STALE"
            )
            cached = await canary.get_integer_details_async(MAX, 0)
            assert (cached.value, cached.reason) == (2000, Reason.CACHED)
            await asyncio.to_thread(live_api.start)
            await eventually(
                lambda: canary.get_provider_status() == ProviderStatus.READY,
                what="status READY once the API is back",
                timeout=20,
            )
            back = await canary.get_integer_details_async(MAX, 0)
            assert (back.value, back.reason) == (2000, Reason.STATIC)  # promoted: now stable


async def test_async_error_until_the_api_answers(live_api: LiveApi) -> None:
    await asyncio.to_thread(stable_served, live_api, STABLE)
    await asyncio.to_thread(live_api.stop)
    with openfeature_events() as events:
        async with AsyncTempoconfProvider(live_api.url, [PATH], client_id="h1", **FAST) as provider:
            with pytest.raises(ProviderNotReadyError):
                api.set_provider_and_wait(provider)
            flags = api.get_client()
            assert flags.get_provider_status() == ProviderStatus.ERROR
            missing = await flags.get_boolean_details_async(FLOW, True)
            assert (missing.value, missing.error_code) == (True, ErrorCode.PROVIDER_NOT_READY)

            await asyncio.to_thread(live_api.start)
            await eventually(
                lambda: flags.get_provider_status() == ProviderStatus.READY,
                what="status READY once the API answers",
                timeout=20,
            )
            assert await flags.get_boolean_value_async(FLOW, True) is False
            await eventually(lambda: events.kinds() == [ERROR, READY], what="ERROR, then READY")


async def test_async_provider_watches_only_once_started(live_api: LiveApi) -> None:
    await asyncio.to_thread(stable_served, live_api, STABLE)
    provider = AsyncTempoconfProvider(live_api.url, [PATH], client_id="h1", **FAST)
    with openfeature_events() as events:
        with pytest.raises(ProviderNotReadyError):
            api.set_provider_and_wait(provider)
        [error] = await eventually(lambda: events.of(ERROR), what="the ERROR event")
        assert error.message is not None and "await provider.start()" in error.message
    await provider.aclose()
