"""The real OpenFeature SDK (PyPI `openfeature-sdk`) with the OFREP provider (PyPI
`openfeature-provider-ofrep`) against the live API on uvicorn, over real HTTP, while a real
rollout runs on Temporal with the worker: a canary reads the canary value and others the stable
one, all follow a promotion and a halt, and a missing path is FLAG_NOT_FOUND.

The provider is synchronous (requests): its calls run in a thread, so the API (on this event
loop) can answer them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from openfeature import api
from openfeature.client import OpenFeatureClient
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import (
    ErrorCode,
    FlagNotFoundError,
    InvalidContextError,
    OpenFeatureError,
    TypeMismatchError,
)
from openfeature.flag_evaluation import FlagEvaluationDetails, FlagResolutionDetails, Reason

from tempoconf.canonical import version_id
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable as store_stable
from tests.api.helpers import publish, start_rollout
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import make_stable, wait_for_state

STABLE = {"max_connections": 1000}
CANARY = {"max_connections": 2000}
HALTED = {"max_connections": 3000}
TOKEN = "ofrep-client-token"
CANARY_HOST = EvaluationContext(targeting_key="canary-1", attributes={"channel": "canary"})
OTHER_HOST = EvaluationContext(targeting_key="web-7", attributes={"zone": "eu"})


@pytest.fixture
def domain() -> Iterator[str]:
    """A provider domain of this test's own (the SDK's registry is global)."""
    name = f"tempoconf-{uuid.uuid4().hex[:8]}"
    yield name
    api.clear_providers()


def openfeature_client(domain: str, url: str, token: str = TOKEN) -> OpenFeatureClient:
    provider = OFREPProvider(
        url,
        headers_factory=lambda: {
            "Authorization": f"Bearer {token}",
            "X-Tempoconf-Namespace": "default",
        },
    )
    api.set_provider(provider, domain=domain)
    return api.get_client(domain=domain)


async def details(
    client: OpenFeatureClient, key: str, context: EvaluationContext
) -> FlagEvaluationDetails[Any]:
    return await asyncio.to_thread(client.get_object_details, key, {"unset": True}, context)


async def test_the_sdk_follows_a_canary_a_promotion_and_a_halt(
    rollout_harness: RolloutHarness, domain: str
) -> None:
    path = f"ofrepsdk/server_config_{uuid.uuid4().hex[:8]}"
    stable = await make_stable(rollout_harness, path, STABLE)
    settings = Settings(client_token=TOKEN)
    async with live_api(rollout_harness.store, settings) as url:
        client = openfeature_client(domain, url)

        async def reads(context: EvaluationContext, value: Any, reason: Reason) -> None:
            async def check() -> FlagEvaluationDetails[Any]:
                got = await details(client, path, context)
                assert (got.value, got.reason) == (value, reason), got
                return got

            found = await eventually(check, what=f"{context.targeting_key} to read {value}")
            assert found.error_code is None
            assert found.variant == version_id(value)
            assert found.flag_metadata["version"] == version_id(value)

        assert (await details(client, path, OTHER_HOST)).variant == stable
        handle = await rollout_harness.start(
            {
                "path": path, "value": CANARY, "default_cooldown_time": "1h",
                "stages": [{"channel": "canary"}, {"percentile": 50}],
                "author": "alice@example.com", "commit": "3f2a9c1",
            },
            real_clock=True,
        )  # fmt: skip
        await wait_for_state(handle, "holding", stage_index=0)

        await reads(CANARY_HOST, CANARY, Reason.TARGETING_MATCH)
        await reads(OTHER_HOST, STABLE, Reason.STATIC)
        canary = await details(client, path, CANARY_HOST)
        assert canary.flag_metadata == {
            "stage": "channel:canary",
            "version": version_id(CANARY),
            "commit": "3f2a9c1",
            "author": "alice@example.com",
        }

        # promotion: the last stage's hold ends, the value becomes stable for everyone
        await handle.execute_update("advance")
        await wait_for_state(handle, "holding", stage_index=1)
        await handle.execute_update("advance")
        assert (await rollout_result(handle))["outcome"] == "promoted"
        await reads(OTHER_HOST, CANARY, Reason.STATIC)
        await reads(CANARY_HOST, CANARY, Reason.STATIC)

        # halt: the canary had the new value, and is back on stable at once
        halted = await rollout_harness.start(
            {"path": path, "value": HALTED, "default_cooldown_time": "1h",
             "stages": [{"channel": "canary"}]},
            real_clock=True,
        )  # fmt: skip
        await wait_for_state(halted, "holding", stage_index=0)
        await reads(CANARY_HOST, HALTED, Reason.TARGETING_MATCH)
        await halted.execute_update("halt", {"reason": "error rate up"})
        assert (await rollout_result(halted))["outcome"] == "halted"
        await reads(CANARY_HOST, CANARY, Reason.STATIC)
        await reads(OTHER_HOST, CANARY, Reason.STATIC)

        missing = await details(client, f"{path}_missing", CANARY_HOST)
        assert missing.error_code == ErrorCode.FLAG_NOT_FOUND
        assert missing.value == {"unset": True}
        assert "unknown config" in (missing.error_message or "")

        refused = await details(openfeature_client(f"{domain}-bad", url, "wrong"), path, OTHER_HOST)
        assert refused.error_code == ErrorCode.GENERAL
        assert refused.value == {"unset": True}


# -- the provider project's own cases, against this server ----------------------------------------
# openfeature-provider-ofrep's tests (python-sdk-contrib, providers/openfeature-provider-ofrep/
# tests/test_provider.py) mock HTTP with requests-mock, so none runs against a server as it is.
# These are its cases that a server decides, asked of the live API instead of a mock: typed values,
# the context sent, FLAG_NOT_FOUND, INVALID_CONTEXT, 401, a type mismatch, the base URL's forms.
TYPED = [
    ("resolve_boolean_details", True, False),
    ("resolve_string_details", "String", "default"),
    ("resolve_integer_details", 100, 0),
    ("resolve_float_details", 10.23, 0.0),
    ("resolve_object_details", {"String": "string", "Number": 2, "Boolean": True}, {}),
    ("resolve_object_details", ["string1", "string2"], []),
]


async def test_the_provider_projects_cases_hold_against_the_live_api(sqlite_store: Store) -> None:
    prefix = f"ofrepcases{uuid.uuid4().hex[:6]}"
    for number, (_, value, _) in enumerate(TYPED):
        store_stable(sqlite_store, f"{prefix}/flag{number}", value)
    targeted = f"{prefix}/targeted"
    store_stable(sqlite_store, targeted, False)
    start_rollout(sqlite_store, targeted, True)
    publish(sqlite_store, targeted, index=0, name="foo", labels={"foo": "bar"})
    async with live_api(sqlite_store, Settings(client_token=TOKEN)) as url:
        for base_url in (url, url + "/"):
            provider = OFREPProvider(
                base_url, headers_factory=lambda: {"Authorization": f"Bearer {TOKEN}"}
            )
            for number, (method, value, default) in enumerate(TYPED):
                key = f"{prefix}/flag{number}"
                got = await asyncio.to_thread(getattr(provider, method), key, default)
                assert got == FlagResolutionDetails(
                    value=value,
                    reason=Reason.STATIC,
                    variant=version_id(value),
                    flag_metadata={"stage": "stable", "version": version_id(value),
                                   "commit": "3f2a9c1", "author": "alice@example.com"},
                ), (method, value)  # fmt: skip
            context = EvaluationContext("1", {"foo": "bar"})
            matched = await asyncio.to_thread(
                provider.resolve_boolean_details, targeted, False, context
            )
            assert (matched.value, matched.reason, matched.variant) == (
                True,
                Reason.TARGETING_MATCH,
                version_id(True),
            )
            with pytest.raises(FlagNotFoundError):
                await asyncio.to_thread(provider.resolve_boolean_details, f"{prefix}/none", False)
            with pytest.raises(InvalidContextError, match="'foo' must be a string"):
                await asyncio.to_thread(
                    provider.resolve_boolean_details, targeted, False,
                    EvaluationContext("1", {"foo": 2}),
                )  # fmt: skip
            with pytest.raises(TypeMismatchError):
                await asyncio.to_thread(provider.resolve_boolean_details, f"{prefix}/flag1", False)
        unauthorized = OFREPProvider(url)
        with pytest.raises(OpenFeatureError) as refused:
            await asyncio.to_thread(unauthorized.resolve_boolean_details, f"{prefix}/flag0", False)
        assert (refused.value.error_code, refused.value.error_message) == (
            ErrorCode.GENERAL,
            "unauthorized",
        )
