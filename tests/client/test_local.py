"""Local evaluation (LocalConfig, AsyncLocalConfig) against the live API over a real store: each
identity resolved in-process is exactly what `GET /v1/configs/{path}` answers it, the bucketing
test vectors included; the watch follows publishes and halts; the disk cache and the hold rule
apply; and a real rollout on Temporal reaches the identities resolved locally."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.client import (
    AsyncLocalConfig,
    ConfigRequestError,
    ConfigUnavailableError,
    ConfigValue,
    LocalConfig,
)
from tempoconf.client._local import LocalResolver, bundle_value
from tempoconf.resolution import ClientIdentity, ConfigSnapshot, PublishedStage, VersionRecord
from tempoconf.resolution.bucketing import percentile_threshold
from tempoconf.settings import Settings
from tests.api.helpers import client_in, publish, start_rollout
from tests.api.helpers import make_stable as store_stable
from tests.client.helpers import PATH, revert, stable_served
from tests.client.live_api import LiveApi
from tests.domain.test_bucketing import VECTORS
from tests.fixtures.services import live_api as live_api_on_this_loop
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually, eventually_sync
from tests.workflows.test_rollout import make_stable, wait_for_state

FAST = {"poll_interval": 0.1, "min_interval": 0.05}
PERCENTILES = {
    # per path of the vectors: a cut right at a vector's bucket, so that one off-by-one in the
    # bucketing or the comparison moves a client across it
    "myproject/server_config": 18.50,  # 1849 in (the last bucket in), 633 in, 7346 and 9790 out
    "a": 11.81,  # 1180 in (the last bucket in)
    "payments/limits": 19.48,  # 1948 out (the first bucket out), 2144 out
    "x/y.z": 0.29,  # 28 in (the last bucket in)
    "team-a/feature_flags": 34.69,  # 3469 out (the first bucket out)
    "default": 72.88,  # 7287 in
}


def served(api_url: str, path: str, identity: ClientIdentity) -> dict[str, Any]:
    params: list[tuple[str, str]] = [("client", identity.client_id)]
    if identity.channel:
        params.append(("channel", identity.channel))
    params += [("label", f"{key}={value}") for key, value in identity.labels.items()]
    response = httpx.get(f"{api_url}/v1/configs/{path}", params=params, timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def assert_same(local: ConfigValue, answer: dict[str, Any]) -> None:
    expected = ConfigValue.from_body(answer, source="api", confirmed_at=0.0, etag=None)
    assert (local.version, local.stage, local.stage_kind, local.value) == (
        expected.version,
        expected.stage,
        expected.stage_kind,
        expected.value,
    )
    assert (local.expires_at, dict(local.metadata)) == (expected.expires_at, expected.metadata)


def test_the_bucketing_vectors_resolve_locally_as_the_api_resolves_them(live_api: LiveApi) -> None:
    store = live_api.store
    stable, staged = {}, {}
    for path, percentile in PERCENTILES.items():
        stable[path] = store_stable(store, path, {"v": "stable"})
        staged[path] = start_rollout(store, path, {"v": "staged"}, run_id=f"run-{path}")
        publish(store, path, index=0, name="split", percentile=percentile, run_id=f"run-{path}")
    for path in PERCENTILES:
        live_api.wait_served(
            path, staged[path].version, client=client_in(path, PERCENTILES[path], inside=True)
        )

    for path, client_id, bucket in VECTORS:
        identity = ClientIdentity(client_id)
        with LocalConfig(live_api.url, path, **FAST) as config:
            local = config.get(client_id)
        # the published formula decides (the vector's bucket), then both sides must agree
        inside = client_id != "" and bucket < percentile_threshold(PERCENTILES[path])
        assert local.stage == ("split" if inside else "stable"), (path, client_id, bucket)
        assert local.version == (staged[path] if inside else stable[path]).version
        assert_same(local, served(live_api.url, path, identity))
        assert local.source == "api"


def test_channels_labels_and_the_anonymous_client_resolve_as_the_api_resolves_them(
    live_api: LiveApi,
) -> None:
    stable_served(live_api, {"v": 1})
    staged = start_rollout(live_api.store, PATH, {"v": 2})
    publish(live_api.store, PATH, index=0, name="canary", channel="canary", labels={"zone": "eu"})
    publish(live_api.store, PATH, index=1, name="all", percentile=100)
    live_api.wait_served(PATH, staged.version, client="x")
    identities = [
        ClientIdentity("c1", channel="canary", labels={"zone": "eu"}),
        ClientIdentity("c2", channel="canary", labels={"zone": "us"}),
        ClientIdentity("", channel="canary", labels={"zone": "eu"}),
        ClientIdentity(""),  # anonymous: never in a percentile stage, even 100%
        ClientIdentity("h1"),
    ]
    config = LocalConfig(live_api.url, PATH)
    try:
        stages = []
        for identity in identities:
            local = config.get(identity.client_id, identity.channel, identity.labels)
            assert_same(local, served(live_api.url, PATH, identity))
            stages.append(local.stage)
    finally:
        config.close()
    assert stages == ["canary", "all", "canary", "stable", "all"]


def test_the_watch_follows_a_publish_and_a_halt_and_the_cache_serves_while_down(
    live_api: LiveApi, cache_dir: Path
) -> None:
    stable = stable_served(live_api, {"v": 1})
    config = LocalConfig(live_api.url, PATH, cache_dir=cache_dir, **FAST)
    sources: list[str] = []
    config.on_source_change(sources.append)
    with config:
        assert config.get("c1", "canary").version == stable.version
        staged = start_rollout(live_api.store, PATH, {"v": 2})
        publish(live_api.store, PATH, index=0, name="canary", channel="canary")

        def canary_sees_it() -> ConfigValue:
            value = config.get("c1", "canary")
            assert (value.version, value.stage, value.source) == (staged.version, "canary", "api")
            return value

        eventually_sync(canary_sees_it, what="the canary stage, locally")
        assert config.get("h1").version == stable.version

        live_api.stop()  # an outage: the bundle in use serves every identity, marked "cache"
        eventually_sync(lambda: config.get("c1", "canary").source == "cache", what="the outage")
        assert config.get("c1", "canary").version == staged.version
        assert config.get("h1").version == stable.version
        assert config.last_error is not None
        assert sources == ["api", "cache"]

    # a restart while the API is down: from the disk cache
    restarted = LocalConfig(live_api.url, PATH, cache_dir=cache_dir, timeout=1)
    try:
        cached = restarted.get("c1", "canary")
        assert (cached.version, cached.stage, cached.source) == (staged.version, "canary", "cache")
        assert restarted.get("h1").version == stable.version
    finally:
        restarted.close()
    with pytest.raises(ConfigUnavailableError):
        LocalConfig(live_api.url, PATH, timeout=1).get("h1")  # no cache, no API

    live_api.start()
    revert(live_api.store)
    with LocalConfig(live_api.url, PATH, cache_dir=cache_dir, **FAST) as back:
        eventually_sync(lambda: back.get("c1", "canary").version == stable.version, what="the halt")
        assert back.get("c1", "canary").source == "api"


def test_unknown_configs_and_nothing_to_serve_are_request_errors(live_api: LiveApi) -> None:
    with pytest.raises(ConfigRequestError) as unknown:
        LocalConfig(live_api.url, "no/such").get("h1")
    assert unknown.value.status == 404
    start_rollout(live_api.store, PATH, {"v": 2})  # no stable yet
    publish(live_api.store, PATH, index=0, name="canary", channel="canary")
    # The rollout alone makes the config known (a bundle with no stable and no stage): wait for
    # the one that carries the published stage.
    eventually_sync(
        lambda: _bundle_stages(f"{live_api.url}/v1/bundles/{PATH}") == 1,
        what="the bundle with the canary stage",
    )
    config = LocalConfig(live_api.url, PATH)
    try:
        assert config.get("c1", "canary").stage == "canary"
        with pytest.raises(ConfigRequestError, match="no stable version yet") as nothing:
            config.get("h1")
        assert nothing.value.status == 404
    finally:
        config.close()


def test_the_hold_rule_keeps_a_staged_value_until_its_lease_against_another_staged_one() -> None:
    now = datetime.now(UTC)
    stable = VersionRecord("s" * 16, {"v": 0})
    first, second = VersionRecord("a" * 16, {"v": 1}), VersionRecord("b" * 16, {"v": 2})
    canary = PublishedStage(0, "canary", "canary", None, {}, now + timedelta(minutes=5))
    everyone = PublishedStage(0, "all", None, 100.0, {}, now + timedelta(minutes=30))

    def bundle(staged: VersionRecord | None, *stages: PublishedStage) -> ConfigValue:
        snapshot = ConfigSnapshot("default", PATH, stable, staged, stages)
        return bundle_value(snapshot, source="api", confirmed_at=0.0, etag=None)

    resolver = LocalResolver()
    c1 = ClientIdentity("c1", channel="canary")

    def version(bundle: ConfigValue, who: ClientIdentity, at: datetime = now) -> str:
        return resolver.value_for(bundle, who, at, url="test").version

    assert version(bundle(first, canary), c1) == first.version
    # another staged version within the canary's lease: c1 keeps the first; h1 was on stable
    moved = bundle(second, everyone)
    assert version(moved, c1) == first.version
    assert version(moved, ClientIdentity("h1")) == second.version
    assert version(moved, c1, now + timedelta(minutes=6)) == second.version  # the lease ended
    # a halt applies at once, and nothing is held after it
    assert version(bundle(None), c1) == stable.version
    assert version(bundle(second, everyone), c1) == second.version


async def test_a_real_rollout_reaches_the_identities_resolved_locally(
    rollout_harness: RolloutHarness,
) -> None:
    path = f"local/server_config_{uuid.uuid4().hex[:8]}"
    stable = await make_stable(rollout_harness, path, {"v": "stable"})
    canary_value, halted_value = {"v": "canary"}, {"v": "halted"}
    async with (
        live_api_on_this_loop(rollout_harness.store, Settings(client_token="t")) as url,
        AsyncLocalConfig(url, path, token="t", **FAST) as config,
    ):

        async def reads(who: tuple[str, str | None], value: Any, stage: str) -> None:
            async def check() -> bool:
                got = await config.get(*who)
                assert (got.value, got.stage, got.source) == (value, stage, "api"), got
                return True

            await eventually(check, what=f"{who} to read {value} on {stage}")

        canary, other = ("canary-1", "canary"), ("web-7", None)
        assert (await config.get(*other)).version == stable
        handle = await rollout_harness.start(
            {"path": path, "value": canary_value, "default_cooldown_time": "1h",
             "stages": [{"channel": "canary"}]},
            real_clock=True,
        )  # fmt: skip
        await wait_for_state(handle, "holding", stage_index=0)
        await reads(canary, canary_value, "channel:canary")
        await reads(other, {"v": "stable"}, "stable")
        await handle.execute_update("advance")
        assert (await rollout_result(handle))["outcome"] == "promoted"
        await reads(other, canary_value, "stable")

        halted = await rollout_harness.start(
            {"path": path, "value": halted_value, "default_cooldown_time": "1h",
             "stages": [{"channel": "canary"}]},
            real_clock=True,
        )  # fmt: skip
        await wait_for_state(halted, "holding", stage_index=0)
        await reads(canary, halted_value, "channel:canary")
        await halted.execute_update("halt", {"reason": "error rate up"})
        assert (await rollout_result(halted))["outcome"] == "halted"
        await reads(canary, canary_value, "stable")
        assert config.snapshot is not None and config.snapshot.staged is None


def _bundle_stages(url: str) -> int | None:
    """How many stages the bundle at `url` carries; None while it is not served."""
    answer = httpx.get(url)
    return len(answer.json()["stages"]) if answer.status_code == 200 else None
