"""Text no backend can store (a NUL, which PostgreSQL's text and jsonb refuse; a lone surrogate,
which no backend can encode) is refused where it comes in, on SQLite and PostgreSQL alike: 400
naming the field, never a 500, and one bad client identity never costs another its record."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from tempoconf.api.distribution import ConfigQuery, PreparedAnswer
from tempoconf.api.seen import flush_seen_clients, write_seen_batches
from tempoconf.resolution import ClientIdentity
from tempoconf.store import SeenClient
from tempoconf.store.store import Store
from tests.api.helpers import make_stable, sample

PATH = "myproject/server_config"
NUL = "x\u0000y"
SURROGATE = "x\ud800y"


@pytest.fixture
def api_database_url(database_url: str) -> str:
    """What the store can keep differs by backend: every test here runs on both."""
    return database_url


def report(version: str, **fields: Any) -> dict[str, Any]:
    return {"path": PATH, "client": "host-1", "version": version, "ok": 10, "failed": 0, **fields}


async def post_json(
    client: httpx.AsyncClient, url: str, body: Any, method: str = "POST"
) -> httpx.Response:
    """`body` as JSON with \\u escapes (httpx's own encoder cannot write a lone surrogate)."""
    return await client.request(
        method, url, content=json.dumps(body), headers={"content-type": "application/json"}
    )


def since() -> datetime:
    return datetime.now(UTC) - timedelta(minutes=5)


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        ({"error": "{bad}"}, "/error"),
        ({"client": "{bad}"}, "/client"),
        ({"channel": "{bad}"}, "/channel"),
        ({"labels": {"zone": "{bad}"}}, "/labels/zone"),
        ({"labels": {"{bad}": "eu"}}, "/labels/"),
    ],
)
async def test_a_report_with_unstorable_text_is_400_naming_the_field(
    bad: str,
    fields: dict[str, Any],
    pointer: str,
    api_store: Store,
    client: httpx.AsyncClient,
) -> None:
    version = make_stable(api_store, PATH, {"v": 1}).version
    filled = {
        key: (
            {k.replace("{bad}", bad): v.replace("{bad}", bad) for k, v in value.items()}
            if isinstance(value, dict)
            else value.replace("{bad}", bad)
        )
        for key, value in fields.items()
    }

    response = await post_json(client, "/v1/reports", report(version, **filled))

    assert response.status_code == 400, response.text
    body = response.json()
    assert any(problem["pointer"].startswith(pointer) for problem in body["problems"]), body
    # (pydantic itself refuses a lone surrogate in some fields, with its own message)
    assert bad != NUL or "NUL character" in body["error"]
    assert api_store.report_totals("default", PATH, since=since()) == []
    # The same report without the bad text is fine.
    assert (await client.post("/v1/reports", json=report(version))).status_code == 202


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"client": NUL}, "client"),
        ({"client": "host-1", "channel": NUL}, "channel"),
        ({"client": "host-1", "label": f"zone={NUL}"}, "label"),
        ({"client": "host-1", "label": f"{NUL}=eu"}, "label"),
    ],
)
async def test_a_poll_with_a_nul_in_its_identity_is_400_and_the_others_are_recorded(
    params: dict[str, str],
    name: str,
    app: Starlette,
    api_store: Store,
    client: httpx.AsyncClient,
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await app.state.snapshot_cache.refresh()
    url = f"/v1/configs/{PATH}"
    assert (await client.get(url, params={"client": "host-2", "channel": "canary"})).is_success

    refused = await client.get(url, params=params)
    assert (await client.get(url, params={"client": "host-3"})).is_success

    assert refused.status_code == 400, refused.text
    assert f"invalid query parameter {name}" in refused.json()["error"]
    assert "NUL" in refused.json()["error"]
    assert await flush_seen_clients(app.state.config_polls, api_store, app.state.metrics) == 2
    seen = api_store.recent_clients("default", PATH, since=since())
    assert sorted(c.client for c in seen) == ["host-2", "host-3"]


def seen_client(name: str, **fields: Any) -> SeenClient:
    return SeenClient(
        client=name,
        channel=fields.get("channel"),
        labels=fields.get("labels", {}),
        last_seen=datetime.now(UTC),
        last_version=None,
    )


@pytest.mark.parametrize(
    "bad",
    [
        seen_client(SURROGATE),
        seen_client("host-bad", channel=SURROGATE),
        seen_client("host-bad", labels={"zone": SURROGATE}),
    ],
    ids=["client", "channel", "label"],
)
def test_a_row_the_database_refuses_costs_no_other_client_its_record(
    bad: SeenClient, api_store: Store
) -> None:
    """Behind the poll's own check: the store refuses one row of a chunk, the rest are written."""
    good = [seen_client(f"host-{n}") for n in range(5)]

    written, refused, failed = write_seen_batches(
        api_store, {("default", PATH): [*good[:2], bad, *good[2:]]}
    )

    assert (written, refused, failed) == (5, [("default", PATH, bad.client)], {})
    recorded = api_store.recent_clients("default", PATH, since=since())
    assert sorted(c.client for c in recorded) == [f"host-{n}" for n in range(5)]


def test_a_nul_the_database_refuses_costs_no_other_client_its_record(api_store: Store) -> None:
    """A NUL is refused by PostgreSQL only; either way every good client is recorded."""
    good = [seen_client(f"host-{n}") for n in range(3)]
    bad = seen_client(NUL)

    written, refused, _ = write_seen_batches(api_store, {("default", PATH): [bad, *good]})

    assert written + len(refused) == 4
    recorded = {c.client for c in api_store.recent_clients("default", PATH, since=since())}
    assert recorded >= {f"host-{n}" for n in range(3)}


async def test_an_unstorable_identity_that_got_into_the_flush_is_dropped_and_counted(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await app.state.snapshot_cache.refresh()
    assert (await client.get(f"/v1/configs/{PATH}", params={"client": "host-1"})).is_success
    polls = app.state.config_polls
    pending = polls.take_seen()
    answer: PreparedAnswer = next(iter(pending.values()))
    for identity in (
        ClientIdentity(client_id=NUL, channel=None, labels={}),
        ClientIdentity(client_id="host-2", channel=SURROGATE, labels={}),
        ClientIdentity(client_id="host-3", channel=None, labels={NUL: "eu"}),
    ):
        pending[ConfigQuery("default", PATH, identity, anonymous=False)] = answer
    polls._seen.update(pending)  # as if the poll path had let them in

    assert await flush_seen_clients(polls, api_store, app.state.metrics) == 1

    assert [c.client for c in api_store.recent_clients("default", PATH, since=since())] == [
        "host-1"
    ]
    metrics = (await client.get("/metrics")).text
    assert sample(metrics, "tempoconf_api_seen_clients_dropped_total") == 3


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        ({"message": "{bad}"}, "/message"),
        ({"author": "{bad}"}, "/author"),
        ({"commit": "{bad}"}, "/commit"),
        ({"value": {"motd": ["ok", "{bad}"]}}, "/value/motd/1"),
        ({"stages": [{"channel": "{bad}"}]}, "/stages/0/channel"),
    ],
)
async def test_a_rollout_with_unstorable_text_is_400_before_anything_starts(
    bad: str,
    fields: dict[str, Any],
    pointer: str,
    api_store: Store,
    client: httpx.AsyncClient,
) -> None:
    """Refused by validation (the API's, the CLI's and the workflow's prepare step share it):
    this app has no Temporal client at all, so a request that got past validation would fail."""
    escaped = json.dumps(bad)[1:-1]  # the \\u escape, as a JSON string spells it
    request = json.dumps({"path": PATH, "value": {"v": 1}, **fields}).replace("{bad}", escaped)
    body = json.loads(request)

    response = await post_json(client, "/v1/admin/rollouts", body)

    assert response.status_code == 400, response.text
    assert [p["pointer"] for p in response.json()["problems"]] == [pointer]
    assert api_store.get_version("default", PATH, "0" * 16) is None
    assert api_store.history("default", PATH, limit=10) == []


async def test_a_schema_with_a_nul_is_400(api_store: Store, client: httpx.AsyncClient) -> None:
    response = await client.put(
        f"/v1/admin/schemas/{PATH}",
        json={"schema": {"type": "object", "description": NUL}, "reason": "docs"},
    )
    refused_reason = await client.put(
        f"/v1/admin/schemas/{PATH}", json={"schema": {"type": "object"}, "reason": NUL}
    )

    assert response.status_code == 400, response.text
    assert response.json()["problems"][0]["pointer"] == "/schema/description"
    assert refused_reason.status_code == 400, refused_reason.text
    assert refused_reason.json()["problems"][0]["pointer"] == "/reason"
    assert api_store.get_schema("default", PATH) is None
