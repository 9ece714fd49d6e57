"""GET /v1/configs/{path}: resolution, ETags, errors (httpx over ASGI, real SQLite store)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tempoconf.api.snapshots import SnapshotCache
from tempoconf.store.records import StageLease
from tempoconf.store.store import Store
from tests.api.helpers import client_in, make_stable, publish, start_rollout

PATH = "myproject/server_config"
URL = f"/v1/configs/{PATH}"
STABLE_VALUE = {"is_debug": False, "max_connections": 1000}
NEW_VALUE = {"is_debug": False, "max_connections": 2000}


async def get(http: httpx.AsyncClient, url: str = URL, **params: object) -> httpx.Response:
    return await http.get(url, params=params)  # type: ignore[arg-type]


async def test_stable_is_served_with_metadata_and_etag(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    await cache.refresh()

    response = await get(client, client="host-1")

    assert response.status_code == 200
    assert response.json() == {
        "namespace": "default",
        "path": PATH,
        "version": stable.version,
        "stage": "stable",
        "stage_kind": None,
        "value": STABLE_VALUE,
        "expires_at": None,
        "metadata": {
            "author": "alice@example.com",
            "commit": "3f2a9c1",
            "message": "test value",
            "created_at": "2024-05-01T12:00:00+00:00",
        },
    }
    assert response.headers["etag"].startswith(f'W/"{stable.version}.')
    assert response.headers["cache-control"] == "no-cache"


async def test_namespaces_are_separate(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, {"team": "a"}, namespace="team-a")
    make_stable(api_store, PATH, {"team": "b"}, namespace="team-b")
    await cache.refresh()

    a = await get(client, namespace="team-a")
    b = await get(client, namespace="team-b")
    missing = await get(client)

    assert (a.json()["value"], b.json()["value"]) == ({"team": "a"}, {"team": "b"})
    assert a.headers["etag"] != b.headers["etag"]
    assert missing.status_code == 404


async def test_stages_are_cumulative(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    canary_stage = publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    publish(api_store, PATH, index=1, name="10%", percentile=10)
    await cache.refresh()
    inside = client_in(PATH, 10, inside=True)
    outside = client_in(PATH, 10, inside=False)
    canary_outside = client_in(PATH, 10, inside=False, prefix="canary-")

    canary = (await get(client, client=canary_outside, channel="canary")).json()
    cohort = (await get(client, client=inside)).json()
    rest = (await get(client, client=outside)).json()
    other_channel = (await get(client, client=outside, channel="beta")).json()

    # The canaries keep the new version while the rollout widens to 10%.
    assert (canary["version"], canary["stage"]) == (staged.version, "channel:canary")
    assert canary["value"] == NEW_VALUE
    assert canary["expires_at"] == canary_stage.expires_at.astimezone(UTC).isoformat()
    assert datetime.fromisoformat(canary["expires_at"]).tzinfo is not None
    assert (cohort["version"], cohort["stage"]) == (staged.version, "10%")
    assert (rest["version"], rest["stage"]) == (stable.version, "stable")
    assert rest["expires_at"] is None
    assert other_channel["version"] == stable.version


async def test_the_answer_says_the_stage_kind_whatever_the_stage_is_named(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="early-birds", channel="canary")
    # A percentile beside a channel, under a name that says neither: still a split.
    publish(api_store, PATH, index=1, name="wave-1", channel="beta", percentile=100)
    await cache.refresh()
    identities = {
        "early-birds": {"client": "host-1", "channel": "canary"},
        "wave-1": {"client": "host-2", "channel": "beta"},
        "stable": {"client": "host-3"},
    }

    polls = {stage: (await get(client, **who)).json() for stage, who in identities.items()}
    sets = {
        stage: (await client.get("/v1/configs", params={"path": PATH, **who})).json()["configs"][0]
        for stage, who in identities.items()
    }

    kinds = {"early-birds": "targeting", "wave-1": "split", "stable": None}
    for answers in (polls, sets):
        assert {stage: answer["stage"] for stage, answer in answers.items()} == {
            stage: stage for stage in kinds
        }
        assert {stage: answer["stage_kind"] for stage, answer in answers.items()} == kinds


async def test_anonymous_clients_match_channel_stages_but_never_percentiles(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    publish(api_store, PATH, index=1, name="100%", percentile=100)
    await cache.refresh()

    anonymous = (await get(client)).json()
    anonymous_canary = (await get(client, channel="canary")).json()
    empty_client = (await get(client, client="")).json()
    identified = (await get(client, client="host-1")).json()

    assert anonymous["version"] == stable.version
    assert empty_client["version"] == stable.version
    assert (anonymous_canary["version"], anonymous_canary["stage"]) == (
        staged.version,
        "channel:canary",
    )
    assert (identified["version"], identified["stage"]) == (staged.version, "100%")


async def test_label_stages_need_every_label(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="eu-web", labels={"region": "eu", "tier": "web"})
    await cache.refresh()

    both = await client.get(URL, params=[("label", "region=eu"), ("label", "tier=web")])
    with_extra = await client.get(
        URL, params=[("label", "tier=web"), ("label", "region=eu"), ("label", "az=eu-1a=x")]
    )
    one = await client.get(URL, params=[("label", "region=eu")])
    wrong = await client.get(URL, params=[("label", "region=us"), ("label", "tier=web")])

    assert (both.json()["version"], both.json()["stage"]) == (staged.version, "eu-web")
    assert with_extra.json()["version"] == staged.version
    assert one.json()["version"] == stable.version
    assert wrong.json()["version"] == stable.version


async def test_stable_true_always_gets_stable(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="all", percentile=100)
    publish(api_store, PATH, index=1, name="channel:canary", channel="canary")
    await cache.refresh()

    response = await get(client, client="host-1", channel="canary", stable="true")
    staged = await get(client, client="host-1", channel="canary", stable="false")

    assert (response.json()["version"], response.json()["stage"]) == (stable.version, "stable")
    assert response.headers["etag"] != staged.headers["etag"]
    assert staged.json()["stage"] == "all"


async def test_an_expired_lease_falls_back_to_stable(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    lapsed_lease = timedelta(seconds=-1)
    publish(
        api_store, PATH, index=0, name="channel:canary", channel="canary", expires_in=lapsed_lease
    )
    publish(api_store, PATH, index=1, name="channel:beta", channel="beta")
    await cache.refresh()

    lapsed = (await get(client, client="host-1", channel="canary")).json()
    live = (await get(client, client="host-1", channel="beta")).json()

    assert (lapsed["version"], lapsed["stage"]) == (stable.version, "stable")
    assert live["version"] == staged.version


async def test_etag_answers_304_until_what_the_client_gets_changes(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    await cache.refresh()
    host = client_in(PATH, 50, inside=True)

    first = await get(client, client=host)
    etag = first.headers["etag"]
    not_modified = await client.get(URL, params={"client": host}, headers={"If-None-Match": etag})

    assert first.status_code == 200 and first.json()["stage"] == "stable"
    assert not_modified.status_code == 304
    assert not_modified.content == b""
    assert not_modified.headers["etag"] == etag
    assert not_modified.headers["cache-control"] == "no-cache"

    # A new stage that reaches this client: a full answer with a new ETag.
    publish(api_store, PATH, index=1, name="50%", percentile=50)
    await cache.refresh()
    changed = await client.get(URL, params={"client": host}, headers={"If-None-Match": etag})

    assert changed.status_code == 200
    assert (changed.json()["version"], changed.json()["stage"]) == (staged.version, "50%")
    assert changed.headers["etag"] != etag

    # A lease renewal moves expires_at only: clients keep their copy.
    staged_etag = changed.headers["etag"]
    renewed_until = datetime.now(UTC) + timedelta(hours=2)
    api_store.renew_leases(
        "default",
        PATH,
        run_id="run-1",
        leases=[StageLease(0, renewed_until), StageLease(1, renewed_until)],
    )
    await cache.refresh()
    after_renewal = await get(client, client=host)
    renewed = await client.get(URL, params={"client": host}, headers={"If-None-Match": staged_etag})

    assert after_renewal.headers["etag"] == staged_etag
    assert datetime.fromisoformat(after_renewal.json()["expires_at"]) == renewed_until
    assert renewed.status_code == 304


@pytest.mark.parametrize(
    "header",
    [
        "{etag}",
        "{strong}",  # weak comparison: W/ is ignored
        '"other", {etag}',
        'W/"other",{etag} ,',
        "*",
    ],
)
async def test_if_none_match_forms(
    header: str, api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    await cache.refresh()
    etag = (await get(client)).headers["etag"]
    value = header.format(etag=etag, strong=etag.removeprefix("W/"))

    response = await client.get(URL, headers={"If-None-Match": value})

    assert response.status_code == 304


@pytest.mark.parametrize("header", ['"other"', 'W/"other", W/"again"', "garbage", ""])
async def test_if_none_match_mismatch_gets_the_value(
    header: str, api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    await cache.refresh()

    response = await client.get(URL, headers={"If-None-Match": header})

    assert response.status_code == 200
    assert response.json()["value"] == STABLE_VALUE


async def test_unknown_config_is_404(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    await cache.refresh()

    response = await get(client, "/v1/configs/myproject/other")

    assert response.status_code == 404
    assert response.json() == {"error": "unknown config 'myproject/other' in namespace 'default'"}


async def test_new_config_mid_rollout_is_404_for_clients_no_stage_reaches(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    await cache.refresh()

    canary = await get(client, client="host-1", channel="canary")
    other = await get(client, client="host-1")
    stable_only = await get(client, client="host-1", channel="canary", stable="true")

    assert canary.status_code == 200 and canary.json()["version"] == staged.version
    assert other.status_code == 404
    assert "has no stable version yet" in other.json()["error"]
    assert "no stage of its rollout applies to this client" in other.json()["error"]
    assert stable_only.status_code == 404
    assert "has no stable version yet" in stable_only.json()["error"]


@pytest.mark.parametrize(
    ("url", "params", "fragment"),
    [
        ("/v1/configs/MyProject/x", {}, "'MyProject' may use only a-z"),
        ("/v1/configs/a//b", {}, "empty segment"),
        ("/v1/configs/a/", {}, "empty segment"),
        ("/v1/configs/", {}, "1-255 characters"),
        ("/v1/configs/" + "a" * 256, {}, "1-255 characters"),
        ("/v1/configs/a/%2E%2E/b", {}, "'..' segment"),
        ("/v1/configs/caf%C3%A9", {}, "may use only a-z"),
        (URL, {"namespace": ""}, "namespace"),
        (URL, {"namespace": "Team A"}, "namespace 'Team A'"),
        (URL, {"label": "region"}, "label='region'"),
        (URL, {"label": "=eu"}, "label key is empty"),
        (URL, [("label", "region=eu"), ("label", "region=us")], "'region' is given twice"),
        (URL, {"stable": "maybe"}, "stable='maybe'"),
    ],
)
async def test_bad_requests_are_400_saying_what_and_where(
    url: str,
    params: object,
    fragment: str,
    api_store: Store,
    cache: SnapshotCache,
    client: httpx.AsyncClient,
) -> None:
    make_stable(api_store, PATH, STABLE_VALUE)
    await cache.refresh()

    response = await client.get(url, params=params)  # type: ignore[arg-type]

    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]
    assert set(response.json()) == {"error"}


async def test_unknown_routes_and_methods_answer_json(client: httpx.AsyncClient) -> None:
    missing = await client.get("/v2/nothing")
    wrong_method = await client.post(URL)

    assert missing.status_code == 404 and "error" in missing.json()
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()


async def test_a_repeated_poll_sees_its_lease_end(
    api_store: Store, cache: SnapshotCache, client: httpx.AsyncClient
) -> None:
    stable = make_stable(api_store, PATH, STABLE_VALUE)
    staged = start_rollout(api_store, PATH, NEW_VALUE)
    # The behaviour under test is a lease lapsing on the wall clock; 2 s leaves a loaded
    # machine time to answer the first poll inside it.
    lease_ends = time.monotonic() + 2.0
    publish(api_store, PATH, index=0, name="all", percentile=100, expires_in=timedelta(seconds=2))
    await cache.refresh()

    during = await get(client, client="host-1")  # its answer is remembered...
    await asyncio.sleep(lease_ends - time.monotonic() + 0.1)
    after = await get(client, client="host-1")  # ...only until the lease ends

    assert during.json()["version"] == staged.version
    assert (after.json()["version"], after.json()["stage"]) == (stable.version, "stable")
