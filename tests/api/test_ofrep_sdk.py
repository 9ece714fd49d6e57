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
from openfeature.exception import ErrorCode
from openfeature.flag_evaluation import FlagEvaluationDetails, Reason

from tempoconf.canonical import version_id
from tempoconf.settings import Settings
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness
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
        assert (await handle.result())["outcome"] == "promoted"
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
        assert (await halted.result())["outcome"] == "halted"
        await reads(CANARY_HOST, CANARY, Reason.STATIC)
        await reads(OTHER_HOST, CANARY, Reason.STATIC)

        missing = await details(client, f"{path}_missing", CANARY_HOST)
        assert missing.error_code == ErrorCode.FLAG_NOT_FOUND
        assert missing.value == {"unset": True}
        assert "unknown config" in (missing.error_message or "")

        refused = await details(openfeature_client(f"{domain}-bad", url, "wrong"), path, OTHER_HOST)
        assert refused.error_code == ErrorCode.GENERAL
        assert refused.value == {"unset": True}
