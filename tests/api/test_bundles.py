"""`GET|HEAD /v1/bundles/{path}` on the real API (uvicorn, real HTTP) over a real store: the
bundle is the config's snapshot, the same for every client, and resolving it gives each client
exactly what `GET /v1/configs/{path}` gives it; strong ETag, 304, long-poll, errors, HEAD."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tempoconf.resolution import ClientIdentity, resolve
from tempoconf.resolution.bundles import bundle_body, bundle_etag, snapshot_from_bundle
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import client_in, long_polls_waiting, make_stable, publish, start_rollout
from tests.api.test_openapi import DocumentedAnswers
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually

PATH = "payments/limits"
BUNDLE = f"/v1/bundles/{PATH}"
STABLE_VALUE = {"max_connections": 1000}
NEW_VALUE = {"max_connections": 2000}
CACHE_CONTROL = "public, max-age=0, must-revalidate"


@pytest.fixture
async def api(api_store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        live_api(api_store) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        yield http


async def bundle_with(
    http: httpx.AsyncClient, check: Any, *, what: str, namespace: str = "default"
) -> httpx.Response:
    """The bundle once `check(body)` holds (the API follows the store within a poll interval)."""

    async def fetched() -> httpx.Response:
        response = await http.get(BUNDLE, params={"namespace": namespace})
        assert response.status_code == 200, response.text
        assert check(response.json()), response.json()
        return response

    return await eventually(fetched, what=what)


async def test_a_stable_only_config_is_its_stable_version_with_a_strong_etag(
    api_store: Store, api: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)

    response = await bundle_with(api, lambda body: True, what="the bundle")

    assert response.json() == {
        "namespace": "default",
        "path": PATH,
        "stable": {
            "version": stable.version,
            "value": STABLE_VALUE,
            "author": "alice@example.com",
            "commit": "3f2a9c1",
            "message": "test value",
            "created_at": "2024-05-01T12:00:00+00:00",
        },
        "staged": None,
        "stages": [],
    }
    # canonical JSON, and its digest as a strong (unprefixed, quoted) ETag
    assert response.content == bundle_body(response.json())
    assert response.headers["etag"] == bundle_etag(response.content)
    assert response.headers["etag"].startswith('"')
    assert response.headers["cache-control"] == CACHE_CONTROL
    assert response.headers["content-type"] == "application/json"
    snapshot = snapshot_from_bundle(response.json())
    assert snapshot.stable == stable
    assert snapshot.stages == ()


async def test_resolving_the_bundle_gives_each_client_what_the_configs_route_gives_it(
    api_store: Store, api: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    canary = publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    half = publish(api_store, PATH, index=1, name="50%", percentile=50, labels={"zone": "eu"})

    response = await bundle_with(api, lambda body: len(body["stages"]) == 2, what="two stages")

    body = response.json()
    assert body["staged"]["version"] == staged.version
    assert body["stable"]["version"] == stable.version
    assert body["stages"] == [
        {"index": 0, "name": "channel:canary", "channel": "canary", "percentile": None,
         "labels": {}, "expires_at": canary.expires_at.isoformat(), "bucket_key": None},
        {"index": 1, "name": "50%", "channel": None, "percentile": 50.0,
         "labels": {"zone": "eu"}, "expires_at": half.expires_at.isoformat(), "bucket_key": None},
    ]  # fmt: skip
    snapshot = snapshot_from_bundle(body)
    identities = [
        ClientIdentity("canary-1", channel="canary"),
        ClientIdentity(client_in(PATH, 50, inside=True), labels={"zone": "eu"}),
        ClientIdentity(client_in(PATH, 50, inside=False), labels={"zone": "eu"}),
        ClientIdentity(client_in(PATH, 50, inside=True), labels={"zone": "us"}),
    ]
    stages = []
    for identity in identities:
        params: list[tuple[str, str]] = [("client", identity.client_id)]
        if identity.channel:
            params.append(("channel", identity.channel))
        params += [("label", f"{key}={value}") for key, value in identity.labels.items()]
        served = (await api.get(f"/v1/configs/{PATH}", params=params)).json()
        local = resolve(snapshot, identity, datetime.now(UTC))
        assert local is not None
        assert (local.record.version, local.stage) == (served["version"], served["stage"])
        assert local.record.value == served["value"]
        stages.append(local.stage)
    # every branch taken: the channel stage, the split (in and out), a label that does not match
    assert stages == ["channel:canary", "50%", "stable", "stable"]
    # and the bundle is the same whoever asks
    again = await api.get(BUNDLE, params={"client": "someone-else", "label": "no-equals-sign"})
    assert again.content == response.content


async def test_if_none_match_answers_304_without_a_body_and_head_answers_no_body(
    api_store: Store, api: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    first = await bundle_with(api, lambda body: True, what="the bundle")
    etag = first.headers["etag"]

    unchanged = await api.get(BUNDLE, headers={"If-None-Match": etag})
    other = await api.get(BUNDLE, headers={"If-None-Match": '"somethingelse"'})
    head = await api.head(BUNDLE)
    head_unchanged = await api.head(BUNDLE, headers={"If-None-Match": f'"x", {etag}'})

    assert unchanged.status_code == 304
    assert unchanged.content == b""
    assert unchanged.headers["etag"] == etag
    assert unchanged.headers["cache-control"] == CACHE_CONTROL
    assert other.status_code == 200
    assert other.content == first.content
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["etag"] == etag
    assert head.headers["content-length"] == str(len(first.content))
    assert head_unchanged.status_code == 304


async def test_a_long_poll_is_answered_by_a_publish_and_else_304_at_its_deadline(
    api_store: Store, api: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    etag = (await bundle_with(api, lambda body: body["staged"], what="staged")).headers["etag"]

    idle = await api.get(BUNDLE, params={"wait": "0.3"}, headers={"If-None-Match": etag})
    assert (idle.status_code, idle.headers["etag"], idle.content) == (304, etag, b"")

    poll = asyncio.create_task(
        api.get(BUNDLE, params={"wait": "30"}, headers={"If-None-Match": etag})
    )
    await long_polls_waiting(api, 1)
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    woken = await poll

    assert woken.status_code == 200
    assert woken.headers["etag"] != etag
    assert woken.headers["etag"] == bundle_etag(woken.content)
    assert woken.json()["staged"]["version"] == staged.version
    assert [stage["name"] for stage in woken.json()["stages"]] == ["channel:canary"]
    await long_polls_waiting(api, 0)


async def test_unknown_configs_bad_parameters_and_a_missing_token_are_refused(
    api_store: Store,
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    async with (
        live_api(api_store, Settings(client_token="secret")) as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer secret"}) as api,
    ):
        await bundle_with(api, lambda body: True, what="the bundle")
        unknown = await api.get("/v1/bundles/payments/nope")
        elsewhere = await api.get(BUNDLE, params={"namespace": "other"})
        bad_wait = await api.get(BUNDLE, params={"wait": "61"})
        bad_namespace = await api.get(BUNDLE, params={"namespace": "Not Valid"})
        bad_path = await api.get("/v1/bundles/Payments/LIMITS")
        anonymous = await api.get(BUNDLE, headers={"Authorization": ""})
        head_unknown = await api.head("/v1/bundles/payments/nope")
        posted = await api.post(BUNDLE)

    assert unknown.status_code == 404
    assert unknown.json() == {"error": "unknown config 'payments/nope' in namespace 'default'"}
    assert elsewhere.status_code == 404
    assert "'other'" in elsewhere.json()["error"]
    assert bad_wait.status_code == 400
    assert "wait" in bad_wait.json()["error"]
    assert bad_namespace.status_code == 400
    assert "namespace" in bad_namespace.json()["error"]
    assert bad_path.status_code == 400
    assert "path" in bad_path.json()["error"]
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert (head_unknown.status_code, head_unknown.content) == (404, b"")
    assert posted.status_code == 405


async def test_the_answers_are_as_documented(api_store: Store, api: httpx.AsyncClient) -> None:
    answers = DocumentedAnswers((await api.get("/openapi.json")).json())
    make_stable(api_store, PATH, STABLE_VALUE)
    start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="10%", percentile=10, labels={"zone": "eu"})
    served = await bundle_with(api, lambda body: body["stages"], what="a stage")

    answers.check("/v1/bundles/{path}", "get", served)
    answers.check("/v1/bundles/{path}", "get", await api.get("/v1/bundles/payments/nope"))
    answers.check("/v1/bundles/{path}", "get", await api.get(BUNDLE, params={"wait": "x"}))
    assert {status for _, _, status in answers.checked} == {200, 400, 404}
    assert json.loads(served.content) == served.json()


async def test_a_held_long_poll_is_answered_at_shutdown_and_a_gone_client_is_dropped(
    api_store: Store,
) -> None:
    from tempoconf.api.server import serve_api

    make_stable(api_store, PATH, {"v": 1})
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_api(Settings(), api_store, port=0, on_started=started.set_result)
    )
    url = await asyncio.wait_for(asyncio.shield(started), timeout=15)
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        etag = (await bundle_with(http, lambda body: True, what="the bundle")).headers["etag"]
        # a client that goes away while it waits: its waiter is dropped, not held to its deadline
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"GET {BUNDLE}?wait=60 HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n".encode()
        )
        await writer.drain()
        await long_polls_waiting(http, 1)
        writer.close()
        await long_polls_waiting(http, 0)

        held = asyncio.create_task(
            http.get(BUNDLE, params={"wait": "60"}, headers={"If-None-Match": etag})
        )
        await long_polls_waiting(http, 1)
        task.cancel()  # a graceful shutdown: the held long-poll is answered, not cut off
        with pytest.raises(asyncio.CancelledError):
            await task
        released = await held

    assert (released.status_code, released.headers["etag"]) == (304, etag)
