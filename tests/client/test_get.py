"""`get()` against a live API: the value, its metadata, errors, and the 304 flow."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from tempoconf.client import (
    AsyncConfigClient,
    ConfigClient,
    ConfigRequestError,
    ConfigUnavailableError,
)
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable, publish, start_rollout
from tests.client.helpers import PATH, stable_served
from tests.client.live_api import LiveApi, running_api
from tests.fixtures.waiting import eventually_sync


def test_get_returns_what_the_api_serves(live_api: LiveApi) -> None:
    stable = stable_served(live_api, {"max_connections": 100})
    client = ConfigClient(live_api.url, PATH, client_id="host-1")
    try:
        config = client.get()
    finally:
        client.close()

    assert config.value == {"max_connections": 100}
    assert config.version == stable.version
    assert config.stage == "stable" and not config.is_staged
    assert config.expires_at is None
    assert config.source == "api"
    assert 0 <= config.age_seconds < 5
    assert config.namespace == "default" and config.path == PATH
    assert config.metadata["author"] == "alice@example.com"
    assert config.metadata["commit"] == "3f2a9c1"


def test_get_resolves_this_clients_identity(live_api: LiveApi) -> None:
    stable_served(live_api, {"v": 1})
    staged = start_rollout(live_api.store, PATH, {"v": 2})
    stage = publish(
        live_api.store, PATH, index=0, name="canary", channel="canary", labels={"region": "eu"}
    )
    live_api.wait_served(PATH, staged.version, channel="canary", label="region=eu")

    canary = ConfigClient(
        live_api.url, PATH, client_id="h1", channel="canary", labels={"region": "eu"}
    )
    other = ConfigClient(
        live_api.url, PATH, client_id="h2", channel="canary", labels={"region": "us"}
    )
    try:
        in_stage, outside = canary.get(), other.get()
    finally:
        canary.close()
        other.close()

    assert (in_stage.version, in_stage.stage) == (staged.version, "canary")
    assert in_stage.expires_at is not None
    assert abs(in_stage.expires_at.timestamp() - stage.expires_at.timestamp()) < 1e-3
    assert outside.stage == "stable" and outside.value == {"v": 1}


async def test_async_get(live_api: LiveApi) -> None:
    stable = stable_served(live_api, {"v": "async"})
    client = AsyncConfigClient(live_api.url, PATH, client_id="host-1")
    try:
        config = await client.get()
    finally:
        await client.aclose()
    assert (config.version, config.value, config.source) == (stable.version, {"v": "async"}, "api")


def test_an_unknown_config_is_a_request_error(live_api: LiveApi, cache_dir: Path) -> None:
    client = ConfigClient(live_api.url, "no/such-config", client_id="h1", cache_dir=cache_dir)
    try:
        with pytest.raises(ConfigRequestError) as caught:
            client.get()
    finally:
        client.close()
    assert caught.value.status == 404
    assert "unknown config" in caught.value.message
    assert client.last_error is not None


def test_no_api_and_no_cache_is_unavailable(tmp_path: Path) -> None:
    client = ConfigClient("http://127.0.0.1:9", PATH, client_id="h1", cache_dir=tmp_path, timeout=2)
    try:
        with pytest.raises(ConfigUnavailableError, match="cannot reach the API"):
            client.get()
    finally:
        client.close()


def test_second_get_sends_the_etag_and_keeps_the_value_on_304(
    live_api: LiveApi, caplog: pytest.LogCaptureFixture
) -> None:
    stable = stable_served(live_api, {"v": 1})
    client = ConfigClient(live_api.url, PATH, client_id="host-1")
    caplog.set_level(logging.INFO, logger="uvicorn.access")
    try:
        first = client.get()
        # Not a wait for anything: the clock moves on, so `confirmed_at` can show the 304 confirmed.
        time.sleep(0.05)
        second = client.get()
    finally:
        client.close()

    statuses = [
        record.args[-1]
        for record in caplog.records
        if record.name == "uvicorn.access" and "client=host-1" in str(record.args)
    ]
    assert statuses == [200, 304]  # the second request carried If-None-Match and was answered 304
    assert second.version == first.version == stable.version
    assert second.value == {"v": 1} and second.source == "api"
    assert second.confirmed_at > first.confirmed_at  # the 304 confirmed the value


def test_client_token(sqlite_store: Store, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "api", client_token="s3cret")
    with running_api(sqlite_store, settings) as api:
        stable = make_stable(sqlite_store, PATH, {"v": 1})
        anonymous = ConfigClient(api.url, PATH, client_id="h1")
        wrong = ConfigClient(api.url, PATH, client_id="h1", token="nope")
        right = ConfigClient(api.url, PATH, client_id="h1", token="s3cret")
        try:
            eventually_sync(
                lambda: _served(right), what="the API's snapshot poll to have the write"
            )
            assert right.get().version == stable.version
            for refused in (anonymous, wrong):
                with pytest.raises(ConfigRequestError) as caught:
                    refused.get()
                assert caught.value.status == 401
        finally:
            for client in (anonymous, wrong, right):
                client.close()


def _served(client: ConfigClient) -> bool:
    try:
        client.get()
    except ConfigRequestError as exc:
        if exc.status == 404:
            return False
        raise
    return True
