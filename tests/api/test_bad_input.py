"""Bad input never gets a 5xx and never changes what is served: each gets a 4xx that says what
is wrong (over real HTTP here, where body limits and chunked uploads are real)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import pytest_asyncio

from tempoconf.api.bodies import ADMIN_BODY_LIMIT, REPORT_BODY_LIMIT, ROLLOUT_BODY_LIMIT
from tempoconf.api.openapi import openapi_document
from tempoconf.api.server import serve_api
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import long_polls_waiting, make_stable, record
from tests.fixtures.extremes import EXTREMES, parts, replaced

PATH = "myproject/server_config"
URL = f"/v1/configs/{PATH}"


@pytest_asyncio.fixture
async def live(api_store: Store, settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    make_stable(api_store, PATH, {"v": 1})
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_api(settings, api_store, port=0, on_started=started.set_result)
    )
    base_url = await asyncio.wait_for(asyncio.shield(started), timeout=10)
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
            yield http
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"wait": "abc"}, "wait='abc'"),
        ({"wait": "61"}, "wait='61'"),
        ({"wait": "-1"}, "wait='-1'"),
        ({"wait": "nan"}, "wait='nan'"),
        ({"wait": "inf"}, "wait='inf'"),
        ({"wait": "1e400"}, "wait='1e400'"),
        ({"stable": "maybe"}, "stable='maybe'"),
        ({"namespace": "../etc"}, "namespace"),
    ],
)
async def test_bad_poll_parameters_are_400(
    params: dict[str, str], fragment: str, live: httpx.AsyncClient
) -> None:
    response = await live.get(URL, params=params, headers={"If-None-Match": "*"})

    assert response.status_code == 400
    assert fragment in response.json()["error"]


async def test_wait_at_its_bounds_is_fine(live: httpx.AsyncClient, api_store: Store) -> None:
    # With If-None-Match of the current answer, so that each wait is taken (without it, any
    # `wait` is answered at once).
    current = {"If-None-Match": (await live.get(URL)).headers["etag"]}
    for wait in ("0", "0.5", ""):
        unchanged = await live.get(URL, params={"wait": wait}, headers=current)
        assert unchanged.status_code == 304, (wait, unchanged.text)
    # The longest: taken too (seen waiting), then answered by a change.
    poll = asyncio.create_task(
        live.get(URL, params={"wait": "60"}, headers=current, timeout=httpx.Timeout(10, read=None))
    )
    await long_polls_waiting(live, 1)
    await asyncio.to_thread(make_stable, api_store, PATH, {"v": 2})
    changed = await poll
    assert changed.status_code == 200 and changed.json()["value"] == {"v": 2}, changed.text


@pytest.mark.parametrize(
    ("url", "params", "fragment"),
    [
        ("/v1/admin/history/Bad/Path", {}, "may use only a-z"),
        (f"/v1/admin/history/{PATH}", {"limit": "0"}, "limit='0'"),
        (f"/v1/admin/history/{PATH}", {"limit": "lots"}, "limit='lots'"),
        # Digits that str.isdigit() or int() take but are not ASCII: a 400, never a 500.
        (f"/v1/admin/history/{PATH}", {"limit": "\u00b2"}, "limit='\u00b2'"),
        (f"/v1/admin/history/{PATH}", {"limit": "\u0663"}, "limit='\u0663'"),
        ("/v1/admin/freezes", {"limit": "\u00b2"}, "limit='\u00b2'"),
        ("/v1/admin/freezes", {"limit": " 5"}, "limit=' 5'"),
        ("/v1/admin/freezes", {"limit": "1001"}, "from 1 to 1000"),
        (f"/v1/admin/versions/{PATH}", {"namespace": "Team A"}, "namespace 'Team A'"),
        ("/v1/admin/configs", {"namespace": "Team A"}, "namespace 'Team A'"),
        (f"/v1/admin/schemas/{PATH}/", {}, "empty segment"),
        (f"/v1/admin/rollouts/{PATH}", {"workflow_id": ""}, "workflow_id"),
    ],
)
async def test_bad_admin_parameters_are_400(
    url: str, params: dict[str, str], fragment: str, live: httpx.AsyncClient
) -> None:
    response = await live.get(url, params=params)

    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]


def _report(**fields: Any) -> dict[str, Any]:
    return {"path": PATH, "client": "h", "version": "v", "ok": 1, "failed": 0, **fields}


@pytest.mark.parametrize(
    ("url", "limit"),
    [
        ("/v1/reports", REPORT_BODY_LIMIT),
        ("/v1/admin/rollouts", ROLLOUT_BODY_LIMIT),
        ("/v1/admin/plans", ROLLOUT_BODY_LIMIT),
        (f"/v1/admin/schemas/{PATH}", ADMIN_BODY_LIMIT),
        ("/v1/admin/freezes", ADMIN_BODY_LIMIT),
    ],
)
async def test_bodies_over_the_limit_are_413_by_length_and_while_chunked(
    url: str, limit: int, live: httpx.AsyncClient
) -> None:
    big = json.dumps(_report(error="x" * limit)).encode()
    method = "PUT" if "schemas" in url else "POST"

    declared = await live.request(method, url, content=big)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: Transfer-Encoding chunked
        for start in range(0, len(big), 8192):
            yield big[start : start + 8192]

    chunked = await live.request(method, url, content=chunks())

    for response in (declared, chunked):
        assert response.status_code == 413, response.text
        assert f"the limit is {limit} bytes" in response.json()["error"]


@pytest.mark.parametrize("url", ["/v1/admin/rollouts", "/v1/admin/plans"])
async def test_a_rollout_request_over_the_admin_limit_reaches_its_validation(
    url: str, live: httpx.AsyncClient
) -> None:
    """1.5 MB: over a rollout request's own size limit (validation's, whose message the CLI and
    a Temporal start get too), under the body limit, which only bounds memory."""
    assert ADMIN_BODY_LIMIT < 1_500_000 < ROLLOUT_BODY_LIMIT
    request = {"path": "Bad/Path", "value": {"blob": "x" * 1_500_000}}

    response = await live.post(url, json=request)

    assert response.status_code == 400, response.text[:300]
    assert response.json()["error"].startswith("invalid rollout request"), response.text[:300]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b'{"path": "a", "ok": 1,', "malformed JSON in the request body at line 1 column 23"),
        (b'{"path": "a"\n "ok": 1}', "line 2 column 2"),
        (b"", "the request body is empty"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"path": "a", "ok": NaN}', "NaN is not a JSON number"),
        (b"[" * 20_000 + b"]" * 20_000, "nested too deeply"),
        (b'"just a string"', "a JSON object, not"),
    ],
)
async def test_malformed_bodies_are_400_with_the_position(
    content: bytes, fragment: str, live: httpx.AsyncClient
) -> None:
    for url, method in (
        ("/v1/reports", "POST"),
        ("/v1/admin/rollouts", "POST"),
        (f"/v1/admin/schemas/{PATH}", "PUT"),
    ):
        response = await live.request(
            method, url, content=content, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, (url, response.text)
        assert fragment in response.json()["error"], url


async def test_wrong_types_list_every_field(live: httpx.AsyncClient) -> None:
    response = await live.post(
        "/v1/reports",
        json={"path": 3, "namespace": [], "client": None, "version": {}, "ok": "1", "failed": 1.5},
    )

    assert response.status_code == 400
    pointers = [problem["pointer"] for problem in response.json()["problems"]]
    assert pointers == ["/path", "/namespace", "/client", "/version", "/ok", "/failed"]


async def test_bad_signal_bodies_are_400(live: httpx.AsyncClient) -> None:
    unknown_field = await live.post(f"/v1/admin/rollouts/{PATH}:halt", json={"raeson": "typo"})
    wrong_type = await live.post(f"/v1/admin/rollouts/{PATH}:halt", json={"reason": 5})
    not_object = await live.post(f"/v1/admin/rollouts/{PATH}:halt", json=["halt"])

    assert unknown_field.status_code == 400 and "/raeson" in unknown_field.json()["error"]
    assert wrong_type.status_code == 400 and "/reason" in wrong_type.json()["error"]
    assert not_object.status_code == 400


async def test_no_bad_request_changes_what_is_served(
    api_store: Store, live: httpx.AsyncClient
) -> None:
    before = await live.get(URL, params={"client": "host-1"})
    revision = api_store.revision()
    garbage = [
        live.get("/v1/configs/" + "%00" * 10),
        live.get("/v1/configs/a/%2e%2e/%2e%2e/etc/passwd"),
        live.get(URL, params=[("label", "a=b"), ("label", "a=c")]),
        live.get(URL, params={"client": "\u0000" * 5000, "channel": "💥"}),
        live.get(URL, headers={"If-None-Match": "W/" + '"' * 1000}),
        live.post("/v1/reports", content=b"{" * 5000),
        live.put(f"/v1/admin/schemas/{PATH}", json={"schema": {"$ref": "#/nowhere"}}),
        live.post("/v1/admin/rollouts", content=b'{"path": "a/b", "value": 1e400}'),
        live.delete(URL),
        live.post(URL, json={}),
    ]
    statuses = [(await call).status_code for call in garbage]

    assert all(400 <= status < 500 or status == 200 for status in statuses), statuses
    after = await live.get(URL, params={"client": "host-1"})
    assert (after.status_code, after.content) == (before.status_code, before.content)
    assert api_store.revision() == revision
    assert (await live.get("/healthz")).status_code == 200


STABLE = record({"v": 1})
"""The version `live` makes stable."""
EXAMPLE_ROLLOUT = Path(__file__).parents[2] / "examples" / "rollout.json"


def _bodies() -> list[tuple[str, str, Any]]:
    """(method, URL, a body the route takes) for every route with a JSON body."""
    rollout = {**json.loads(EXAMPLE_ROLLOUT.read_text()), "path": PATH}
    return [
        ("POST", "/v1/reports", _report(version=STABLE.version, error="boom")),
        ("POST", "/v1/admin/plans", rollout),
        ("POST", "/v1/admin/freezes", {"namespace": "frozen", "reason": "r", "until": "1h"}),
        ("POST", "/v1/admin/freezes/frozen:end", {"reason": "r", "by": "me"}),
        ("PUT", f"/v1/admin/schemas/{PATH}", {"schema": {"type": "object"}, "reason": "r"}),
        ("POST", f"/ofrep/v1/evaluate/flags/{PATH}", {"context": {"targetingKey": "h1"}}),
        ("POST", "/ofrep/v1/evaluate/flags", {"context": {"targetingKey": "h1", "zone": "a"}}),
    ]


@pytest.mark.parametrize(("method", "url", "body"), _bodies(), ids=lambda part: str(part)[:30])
async def test_an_extreme_value_anywhere_in_a_body_is_never_a_server_error(
    method: str, url: str, body: Any, live: httpx.AsyncClient
) -> None:
    async def send(document: Any) -> httpx.Response:
        # json.dumps writes a lone surrogate as an escape, as hostile clients send it
        content = json.dumps(document).encode()
        headers = {"Content-Type": "application/json"}
        return await live.request(method, url, content=content, headers=headers)

    if url.endswith(":end"):  # something to end; the sweep's ends are refused, 400 or 404
        await live.post("/v1/admin/freezes", json={"namespace": "frozen", "reason": "r"})
    assert (await send(body)).status_code < 300  # the route takes the body as it is
    failures: list[str] = []
    for at in list(parts(body)):
        for extreme in EXTREMES:
            response = await send(replaced(body, at, extreme))
            # a refusal says why: `error` (tempoconf's routes) or `errorDetails` (OFREP's)
            said = response.status_code < 400 or {"error", "errorDetails"} & response.json().keys()
            if response.status_code >= 500 or not said:
                pointer = "/" + "/".join(map(str, at))
                failures.append(f"{pointer} = {str(extreme)[:20]!r}: {response.status_code}")

    assert not failures, "\n".join(failures[:20])


def _query_parameters() -> list[tuple[str, str, set[int]]]:
    """(URL, query parameter, the statuses the GET documents) for every query parameter of every
    GET the API documents, but the rollout's state (it asks Temporal, which `live` has none of)."""
    document = openapi_document()
    shared = document.get("components", {}).get("parameters", {})
    found = []
    for template, operations in document["paths"].items():
        if "get" not in operations or template.startswith("/v1/admin/rollouts"):
            continue
        for parameter in operations["get"].get("parameters", []):
            if "$ref" in parameter:
                parameter = shared[parameter["$ref"].rsplit("/", 1)[-1]]
            if parameter["in"] == "query":
                documented = {int(status) for status in operations["get"]["responses"]}
                found.append((template.replace("{path}", PATH), parameter["name"], documented))
    return found


@pytest.mark.parametrize(
    ("url", "name", "documented"),
    _query_parameters(),
    ids=lambda part: part if isinstance(part, str) else "-",
)
async def test_an_extreme_query_parameter_is_never_a_server_error(
    url: str, name: str, documented: set[int], live: httpx.AsyncClient
) -> None:
    # `limit=²` answered 500 once: str.isdigit() takes superscripts, int() does not.
    texts = [str(extreme) for extreme in EXTREMES if not isinstance(extreme, list | dict)]
    queries = [f"{name}={quote(text.encode('utf-8', 'surrogatepass'))}" for text in texts]
    queries += [f"{name}=%FF%FE", f"{name}=1&{name}=2", name, f"{name}=%00"]
    failures = []
    for query in queries:
        response = await live.get(f"{url}?{query}")
        # a 5xx the route documents is an answer (/readyz: 503 past max_age), not a crash
        if response.status_code >= 500 and response.status_code not in documented:
            failures.append(f"?{query[:60]}: {response.status_code} {response.text[:100]}")

    assert not failures, "\n".join(failures)
