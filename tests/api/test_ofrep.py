"""OFREP's evaluation endpoints (docs/contract.md, OFREP) on the app with a real store, on both
backends: the value is what the poll serves, reasons by stage kind, the bulk call's ETag and 304,
errors in OFREP's shape, tokens, clients seen."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from tempoconf.api.app import create_app
from tempoconf.api.ofrep import OFREP_BODY_LIMIT
from tempoconf.api.seen import flush_seen_clients
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import client_in, make_stable, publish, sample, start_rollout
from tests.api.test_openapi import DocumentedAnswers
from tests.api.test_read_limits import connect, read_until_closed
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually

FLAGS = "/ofrep/v1/evaluate/flags"
STABLE = {"max_connections": 1000}
STAGED = {"max_connections": 2000}


@pytest.fixture
def api_database_url(database_url: str) -> str:
    """Every test here on SQLite and on PostgreSQL."""
    return database_url


def unique(name: str = "server_config") -> str:
    return f"ofrep{uuid.uuid4().hex[:8]}/{name}"


async def evaluate(
    http: httpx.AsyncClient, key: str, context: dict[str, Any] | None = None, **kwargs: Any
) -> httpx.Response:
    body = {"context": context} if context is not None else {}
    return await http.post(f"{FLAGS}/{key}", json=body, **kwargs)


async def poll(http: httpx.AsyncClient, path: str, **params: str) -> dict[str, Any]:
    answer = await http.get(f"/v1/configs/{path}", params=params)
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


async def refreshed(app: Starlette) -> None:
    await app.state.snapshot_cache.refresh()


async def test_a_stable_flag_is_the_configs_value_static_with_its_version_as_variant(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    path = unique()
    stable = make_stable(api_store, path, STABLE)
    await refreshed(app)

    answer = await evaluate(client, path, {"targetingKey": "host-1"})

    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {
        "key": path,
        "reason": "STATIC",
        "variant": stable.version,
        "metadata": {
            "stage": "stable",
            "version": stable.version,
            "commit": "3f2a9c1",
            "author": "alice@example.com",
        },
        "value": STABLE,
    }
    polled = await poll(client, path, client="host-1")
    assert (polled["value"], polled["version"]) == (answer.json()["value"], stable.version)


async def test_each_stage_kind_gives_its_reason_and_the_polls_value(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    path = unique()
    stable = make_stable(api_store, path, STABLE)
    staged = start_rollout(api_store, path, STAGED)
    publish(api_store, path, index=0, name="channel:canary", channel="canary")
    publish(api_store, path, index=1, name="eu", labels={"region": "eu"})
    publish(api_store, path, index=2, name="10%", percentile=10)
    await refreshed(app)
    inside = client_in(path, 10, inside=True)
    outside = client_in(path, 10, inside=False)
    cases = [
        # (context, the poll's query, reason, stage, version)
        ({"targetingKey": outside, "channel": "canary"}, {"client": outside, "channel": "canary"},
         "TARGETING_MATCH", "channel:canary", staged.version),
        ({"targetingKey": outside, "region": "eu", "team": "web"},
         {"client": outside, "label": "region=eu"}, "TARGETING_MATCH", "eu", staged.version),
        ({"targetingKey": inside}, {"client": inside}, "SPLIT", "10%", staged.version),
        ({"targetingKey": outside}, {"client": outside}, "STATIC", "stable", stable.version),
        ({"targetingKey": outside, "region": "us"}, {"client": outside, "label": "region=us"},
         "STATIC", "stable", stable.version),
    ]  # fmt: skip
    for context, query, reason, stage, version in cases:
        answer = await evaluate(client, path, context)
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert (got["reason"], got["metadata"]["stage"], got["variant"]) == (
            reason,
            stage,
            version,
        ), context
        polled = await poll(client, path, **query)
        assert (polled["stage"], polled["version"], polled["value"]) == (
            got["metadata"]["stage"],
            got["variant"],
            got["value"],
        ), context


async def test_a_client_without_targeting_key_is_anonymous_never_in_a_percentile(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    path = unique()
    stable = make_stable(api_store, path, STABLE)
    start_rollout(api_store, path, STAGED)
    publish(api_store, path, index=0, name="everyone", percentile=100)
    await refreshed(app)

    for body in (b"{}", b'{"context": {}}', b'{"context": {"targetingKey": ""}}'):
        answer = await client.post(f"{FLAGS}/{path}", content=body)
        assert answer.status_code == 200, (body, answer.text)
        assert (answer.json()["variant"], answer.json()["reason"]) == (stable.version, "STATIC")
    named = await evaluate(client, path, {"targetingKey": "host-1"})
    assert (named.json()["reason"], named.json()["metadata"]["stage"]) == ("SPLIT", "everyone")


async def test_the_bulk_call_evaluates_every_config_of_the_namespace_sorted_by_key(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    namespace = f"ofrep-{uuid.uuid4().hex[:8]}"
    make_stable(api_store, "b/second", {"n": 2}, namespace=namespace)
    first = make_stable(api_store, "a/first", {"n": 1}, namespace=namespace)
    make_stable(api_store, "elsewhere/config", {"n": 3}, namespace=f"{namespace}-other")
    # staged only, no stable: nothing for a client outside its stage
    start_rollout(api_store, "c/canary-only", {"n": 4}, namespace=namespace)
    publish(api_store, "c/canary-only", index=0, name="channel:canary", channel="canary",
            namespace=namespace)  # fmt: skip
    await refreshed(app)
    headers = {"X-Tempoconf-Namespace": namespace}

    answer = await client.post(FLAGS, json={"context": {"targetingKey": "h"}}, headers=headers)

    assert answer.status_code == 200, answer.text
    assert answer.headers["etag"].startswith('W/"ofrep.')
    flags = answer.json()["flags"]
    assert [flag["key"] for flag in flags] == ["a/first", "b/second", "c/canary-only"]
    assert flags[0] == {
        "key": "a/first",
        "reason": "STATIC",
        "variant": first.version,
        "metadata": {"stage": "stable", "version": first.version, "commit": "3f2a9c1",
                     "author": "alice@example.com"},
        "value": {"n": 1},
    }  # fmt: skip
    assert flags[2]["errorCode"] == "FLAG_NOT_FOUND"
    assert "no stable version yet" in flags[2]["errorDetails"]
    canary = await client.post(
        FLAGS, json={"context": {"targetingKey": "h", "channel": "canary"}}, headers=headers
    )
    assert canary.json()["flags"][2]["reason"] == "TARGETING_MATCH"
    assert canary.headers["etag"] != answer.headers["etag"]
    # The namespace comes from the header only; without it, `default`.
    other = await client.post(
        FLAGS, json={}, headers={"X-Tempoconf-Namespace": f"{namespace}-other"}
    )
    assert [flag["key"] for flag in other.json()["flags"]] == ["elsewhere/config"]
    nothing = await client.post(FLAGS, json={}, headers={"X-Tempoconf-Namespace": "ofrep-none"})
    assert nothing.status_code == 200 and nothing.json() == {"flags": []}


async def test_the_bulk_etag_gives_304_until_what_this_client_resolves_to_changes(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    namespace = f"ofrep-{uuid.uuid4().hex[:8]}"
    path = "app/config"
    make_stable(api_store, path, STABLE, namespace=namespace)
    await refreshed(app)
    canary = {"targetingKey": "host-1", "channel": "canary"}
    other = {"targetingKey": "host-2"}

    async def bulk(context: dict[str, str], etag: str | None = None) -> httpx.Response:
        headers = {"X-Tempoconf-Namespace": namespace}
        if etag is not None:
            headers["If-None-Match"] = etag
        return await client.post(FLAGS, json={"context": context}, headers=headers)

    first_canary, first_other = await bulk(canary), await bulk(other)
    etags = {"canary": first_canary.headers["etag"], "other": first_other.headers["etag"]}
    again = await bulk(canary, etags["canary"])
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etags["canary"]
    assert (await bulk(canary, 'W/"something-else"')).status_code == 200

    start_rollout(api_store, path, STAGED, namespace=namespace)
    publish(api_store, path, index=0, name="channel:canary", channel="canary",
            namespace=namespace, expires_in=timedelta(seconds=2))  # fmt: skip
    await refreshed(app)

    moved = await bulk(canary, etags["canary"])
    assert moved.status_code == 200
    assert moved.json()["flags"][0]["value"] == STAGED
    assert (await bulk(other, etags["other"])).status_code == 304  # not in the stage: unchanged

    # The lease lapses with no write (a workflow gone): the canary is back on stable.
    async def back_on_stable() -> bool:
        answer = await bulk(canary, moved.headers["etag"])
        return answer.status_code == 200 and answer.json()["flags"][0]["value"] == STABLE

    await eventually(back_on_stable, what="the canary back on stable after its lease", timeout=10)
    assert (await bulk(canary, etags["canary"])).status_code == 304  # the same as before


async def test_a_missing_or_invalid_flag_is_flag_not_found_with_its_key(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    path = unique()
    start_rollout(api_store, path, STAGED)  # no stable yet
    publish(api_store, path, index=0, name="channel:canary", channel="canary")
    await refreshed(app)
    missing = unique("missing")
    for key, details in (
        (missing, f"unknown config {missing!r} in namespace 'default'"),
        ("Not/A-Path", "a flag key is a config path"),
        (path, "no stable version yet, and no stage of its rollout applies to this client"),
    ):
        answer = await evaluate(client, key, {"targetingKey": "host-1"})
        assert answer.status_code == 404, answer.text
        got = answer.json()
        assert (got["key"], got["errorCode"]) == (key, "FLAG_NOT_FOUND")
        assert details in got["errorDetails"]
    elsewhere = await evaluate(
        client, path, {"targetingKey": "host-1", "channel": "canary"},
        headers={"X-Tempoconf-Namespace": "another"},
    )  # fmt: skip
    assert elsewhere.status_code == 404
    assert "in namespace 'another'" in elsewhere.json()["errorDetails"]


@pytest.mark.parametrize(
    ("body", "code", "details"),
    [
        (b"", "PARSE_ERROR", "the request body is empty: expected a JSON object"),
        (b" \n", "PARSE_ERROR", "the request body is empty: expected a JSON object"),
        (b"{not json", "PARSE_ERROR", "malformed JSON in the request body at line 1"),
        (b"[1, 2]", "PARSE_ERROR", "must be a JSON object with a `context`, not an array"),
        (b"\xff\xfe", "PARSE_ERROR", "not UTF-8"),
        (b'{"context": [1]}', "INVALID_CONTEXT", "`context` must be a JSON object, not an array"),
        (b'{"context": null}', "INVALID_CONTEXT", "`context` must be a JSON object, not null"),
        (
            b'{"context": {"targetingKey": 42}}',
            "INVALID_CONTEXT",
            "'targetingKey' must be a string (the client id), not a number",
        ),
        (
            b'{"context": {"targetingKey": "h", "channel": true}}',
            "INVALID_CONTEXT",
            "'channel' must be a string (the client's channel), not a boolean",
        ),
        (
            b'{"context": {"targetingKey": "h", "age": 42}}',
            "INVALID_CONTEXT",
            "'age' must be a string (a label: label values are strings), not a number",
        ),
        (
            b'{"context": {"targetingKey": "h\\u0000x"}}',
            "INVALID_CONTEXT",
            "'targetingKey' contains a NUL character",
        ),
        (
            b'{"context": {"targetingKey": "h", "zone": "\\ud800"}}',
            "INVALID_CONTEXT",
            "'zone' contains a lone surrogate",
        ),
        (b'{"context": {"targetingKey": NaN}}', "PARSE_ERROR", "NaN is not a JSON number"),
    ],  # fmt: skip
)
async def test_bad_bodies_are_400_with_ofreps_code_naming_what(
    app: Starlette,
    api_store: Store,
    client: httpx.AsyncClient,
    body: bytes,
    code: str,
    details: str,
) -> None:
    path = unique()
    make_stable(api_store, path, STABLE)
    await refreshed(app)
    single = await client.post(f"{FLAGS}/{path}", content=body)
    bulk = await client.post(FLAGS, content=body)
    for answer in (single, bulk):
        assert answer.status_code == 400, answer.text
        assert answer.json()["errorCode"] == code
        assert details in answer.json()["errorDetails"], answer.json()
    assert single.json()["key"] == path
    assert "key" not in bulk.json()  # a bulk call's error is about the whole call


async def test_bad_namespace_headers_and_big_bodies_are_refused(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    path = unique()
    make_stable(api_store, path, STABLE)
    await refreshed(app)
    bad = await client.post(FLAGS, json={}, headers={"X-Tempoconf-Namespace": "Bad Namespace"})
    assert bad.status_code == 400
    assert bad.json()["errorCode"] == "GENERAL"
    assert "invalid header X-Tempoconf-Namespace" in bad.json()["errorDetails"]
    big = b'{"context": {"targetingKey": "' + b"h" * OFREP_BODY_LIMIT + b'"}}'
    for target in (FLAGS, f"{FLAGS}/{path}"):
        answer = await client.post(target, content=big)
        assert answer.status_code == 413, answer.text
        assert "too large" in answer.json()["errorDetails"]
    assert (await client.get(FLAGS)).status_code == 405
    assert (await client.get(f"{FLAGS}/{path}")).status_code == 405


@pytest.fixture
def token_settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, client_token="client-secret", admin_token="admin-secret")


async def test_the_client_token_guards_both_calls(
    api_store: Store, token_settings: Settings
) -> None:
    path = unique()
    make_stable(api_store, path, STABLE)
    app = create_app(api_store, token_settings, poll_interval=0.05)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://tempoconf.test") as http:
            for target in (FLAGS, f"{FLAGS}/{path}"):
                for headers in ({}, {"Authorization": "Bearer admin-secret"},
                                {"Authorization": "Bearer wrong"}):  # fmt: skip
                    refused = await http.post(target, json={}, headers=headers)
                    assert refused.status_code == 401, (target, headers)
                    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
                    assert refused.json()["errorCode"] == "GENERAL"
                    assert "client token" in refused.json()["errorDetails"]
                served = await http.post(
                    target, json={}, headers={"Authorization": "Bearer client-secret"}
                )
                assert served.status_code == 200, served.text


async def test_a_named_client_is_seen_like_a_poll_for_plans_and_gates(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    path = unique()
    other = unique("other")
    stable = make_stable(api_store, path, STABLE)
    make_stable(api_store, other, {"n": 1})
    await refreshed(app)
    context = {"targetingKey": "ofrep-host", "channel": "canary", "zone": "eu"}
    assert (await evaluate(client, path, context)).status_code == 200
    assert (await client.post(FLAGS, json={"context": {"targetingKey": "bulk-host"}})).is_success
    assert (await evaluate(client, path, {})).status_code == 200  # anonymous: not seen

    await flush_seen_clients(app.state.config_polls, api_store, app.state.metrics)

    listed = (await client.get(f"/v1/admin/clients/{path}")).json()["clients"]
    assert [(c["client"], c["channel"], c["labels"], c["last_version"]) for c in listed] == [
        ("bulk-host", None, {}, stable.version),
        ("ofrep-host", "canary", {"zone": "eu"}, stable.version),
    ]
    # The bulk call saw its client on every config of the namespace.
    others = (await client.get(f"/v1/admin/clients/{other}")).json()["clients"]
    assert [c["client"] for c in others] == ["bulk-host"]


async def test_answers_are_counted_and_match_the_openapi_document(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    path = unique()
    make_stable(api_store, path, STABLE)
    start_rollout(api_store, path, STAGED)
    publish(api_store, path, index=0, name="5%", percentile=5)
    await refreshed(app)
    answers = DocumentedAnswers((await client.get("/openapi.json")).json())
    flag, bulk = "/ofrep/v1/evaluate/flags/{key}", "/ofrep/v1/evaluate/flags"
    inside = client_in(path, 5, inside=True)

    answers.check(flag, "post", await evaluate(client, path, {"targetingKey": inside}))
    answers.check(flag, "post", await evaluate(client, path, {"targetingKey": "h", "n": 1}))
    answers.check(flag, "post", await evaluate(client, unique("missing"), {}))
    first = await client.post(bulk, json={"context": {"targetingKey": inside}})
    answers.check(bulk, "post", first)
    answers.check(bulk, "post", await client.post(bulk, content=b"[]"))
    again = await client.post(
        bulk,
        json={"context": {"targetingKey": inside}},
        headers={"If-None-Match": first.headers["etag"]},
    )
    assert again.status_code == 304

    metrics = (await client.get("/metrics")).text
    assert sample(metrics, "tempoconf_api_ofrep_evaluations_total", kind="bulk", code="304") == 1
    assert sample(metrics, "tempoconf_api_ofrep_evaluations_total", kind="flag", code="404") == 1
    assert sample(metrics, "tempoconf_api_ofrep_evaluations_total", kind="flag", code="200") == 1


async def test_a_body_that_stops_coming_is_408_or_a_closed_connection_never_a_hang(
    api_store: Store, settings: Settings
) -> None:
    """Part of the body, then nothing: 408 in OFREP's shape (bounded_body). The head and no body
    at all: the server's protocol closes the connection (its body backstop): the first read of a
    body costs no timer of the handler's own (api/ofrep.py, _read_body)."""
    path = unique()
    make_stable(api_store, path, STABLE)
    bounded = replace(settings, api_header_timeout=1.0, api_body_timeout=1.0)
    head = (
        f"POST {FLAGS}/{path} HTTP/1.1\r\nHost: test\r\ncontent-type: application/json\r\n"
        "content-length: 100\r\n\r\n"
    )
    async with live_api(api_store, bounded) as url:
        with connect(url) as partial:
            partial.sendall(head.encode() + b'{"context": ')
            answer = await asyncio.to_thread(read_until_closed, partial)
        with connect(url) as silent:
            silent.sendall(head.encode())
            nothing = await asyncio.to_thread(read_until_closed, silent)
        async with httpx.AsyncClient(base_url=url) as http:  # and the server still serves
            served = await http.post(f"{FLAGS}/{path}", json={"context": {"targetingKey": "h"}})

    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout", answer
    error = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert (error["key"], error["errorCode"]) == (path, "GENERAL")
    assert error["errorDetails"].startswith("the request body was not received within 1s")
    assert nothing == b""  # closed without an answer (the socket read would time out otherwise)
    assert served.status_code == 200
