"""Clients seen polling: remembered in memory by the poll path, flushed to the store
(Store.recent_clients), listed by GET /v1/admin/clients/{path}."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

import tempoconf.api.polls
from tempoconf.api.app import create_app
from tempoconf.api.seen import flush_seen_clients
from tempoconf.settings import Settings
from tempoconf.store import SeenClient, Store
from tests.api.helpers import make_stable, publish, sample, start_rollout
from tests.fixtures.waiting import eventually

PATH = "myproject/server_config"
POLLS = [
    "client=host-1&channel=canary&label=zone=eu&label=tier=web",
    "client=host-2&label=zone=us",
    "channel=canary",  # anonymous: not remembered
]


async def poll_all(app: Starlette, http: httpx.AsyncClient, queries: list[str] = POLLS) -> None:
    await app.state.snapshot_cache.refresh()
    for query in queries:
        response = await http.get(f"/v1/configs/{PATH}?{query}")
        assert response.status_code == 200, response.text
        again = await http.get(
            f"/v1/configs/{PATH}?{query}", headers={"If-None-Match": response.headers["etag"]}
        )
        assert again.status_code == 304


def recent(store: Store) -> list[SeenClient]:
    return store.recent_clients("default", PATH, since=datetime.now(UTC) - timedelta(minutes=5))


def identities(
    clients: list[SeenClient],
) -> list[tuple[str, str | None, dict[str, str], str | None]]:
    return [(c.client, c.channel, c.labels, c.last_version) for c in clients]


async def flush(app: Starlette, store: Store) -> int:
    return await flush_seen_clients(app.state.config_polls, store, app.state.metrics)


async def test_named_clients_are_recorded_after_a_flush(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    version = make_stable(api_store, PATH, {"v": 1}).version
    await poll_all(app, client)
    assert recent(api_store) == [], "polls never wait for the store"

    written = await flush(app, api_store)

    assert written == 2
    assert identities(recent(api_store)) == [
        ("host-1", "canary", {"tier": "web", "zone": "eu"}, version),
        ("host-2", None, {"zone": "us"}, version),
    ]
    assert await flush(app, api_store) == 0, "a flush takes what it writes"


async def test_the_admin_endpoint_lists_recent_clients(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    version = make_stable(api_store, PATH, {"v": 1}).version
    await poll_all(app, client)
    await flush(app, api_store)
    api_store.add_report("default", PATH, client="reporter", version=version, ok=1, failed=0)

    response = await client.get(f"/v1/admin/clients/{PATH}")
    longer = await client.get(f"/v1/admin/clients/{PATH}?namespace=default&since_seconds=86400")
    elsewhere = await client.get(f"/v1/admin/clients/{PATH}?namespace=team")

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["namespace"], body["path"]) == ("default", PATH)
    since = datetime.fromisoformat(body["since"])
    assert abs((datetime.now(UTC) - since) - timedelta(hours=1)) < timedelta(minutes=1)
    applied_keys = {"applied_version", "applied_at", "apply_error", "apply_error_version"}
    # no client here reported an apply (tests/api/test_applied_reports.py): those are all null
    assert all(c[k] is None for c in body["clients"] for k in applied_keys)
    listed = [
        {k: v for k, v in c.items() if k != "last_seen" and k not in applied_keys}
        for c in body["clients"]
    ]
    assert listed == [
        {
            "client": "host-1",
            "channel": "canary",
            "labels": {"tier": "web", "zone": "eu"},
            "last_version": version,
        },
        {"client": "host-2", "channel": None, "labels": {"zone": "us"}, "last_version": version},
        {"client": "reporter", "channel": None, "labels": {}, "last_version": version},
    ]
    for entry in body["clients"]:
        assert datetime.now(UTC) - datetime.fromisoformat(entry["last_seen"]) < timedelta(minutes=1)
    assert longer.json()["clients"] == body["clients"]
    assert elsewhere.status_code == 200 and elsewhere.json()["clients"] == []


@pytest.mark.parametrize("since", ["0", "-5", "abc", "nan", "inf", str(8 * 24 * 3600)])
async def test_the_admin_endpoint_refuses_a_bad_since(
    since: str, client: httpx.AsyncClient
) -> None:
    response = await client.get(f"/v1/admin/clients/{PATH}?since_seconds={since}")

    assert response.status_code == 400
    assert "since_seconds" in response.json()["error"]


async def test_the_admin_endpoint_needs_the_admin_token(api_store: Store, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, admin_token="admin-secret", client_token="client-secret")
    app = create_app(api_store, settings, poll_interval=0.05)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            missing = await http.get(f"/v1/admin/clients/{PATH}")
            client_token = await http.get(
                f"/v1/admin/clients/{PATH}", headers={"Authorization": "Bearer client-secret"}
            )
            admin = await http.get(
                f"/v1/admin/clients/{PATH}", headers={"Authorization": "Bearer admin-secret"}
            )

    for refused in (missing, client_token):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
    assert admin.status_code == 200 and admin.json()["clients"] == []


@pytest.fixture
async def flushing(
    api_store: Store, settings: Settings
) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    """The API flushing every 50 ms."""
    app = create_app(api_store, settings, poll_interval=0.05, seen_flush_interval=0.05)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            yield app, http


async def test_the_lifespan_flushes_on_its_own(
    api_store: Store, flushing: tuple[Starlette, httpx.AsyncClient]
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    await poll_all(*flushing)

    def recorded() -> list[str]:
        clients = [c.client for c in recent(api_store)]
        return clients if len(clients) >= 2 else []

    # Recorded while the app still runs: by its periodic flush, not the one at shutdown.
    clients = await eventually(recorded, what="the lifespan's flush to record two clients")
    assert clients == ["host-1", "host-2"]


async def test_shutdown_flushes_what_is_pending(api_store: Store, settings: Settings) -> None:
    make_stable(api_store, PATH, {"v": 1})
    app = create_app(api_store, settings, poll_interval=0.05, seen_flush_interval=3600)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
        ) as http:
            await poll_all(app, http)
        assert recent(api_store) == []

    assert [c.client for c in recent(api_store)] == ["host-1", "host-2"]


async def test_pending_identities_are_bounded_and_drops_counted(
    app: Starlette, api_store: Store, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempoconf.api.polls, "SEEN_PENDING_MAX", 3)
    make_stable(api_store, PATH, {"v": 1})
    long_id = "x" * 256  # more than the store keeps: left out at the flush, counted too

    # Pending entries are per query string: "a" changing its channel takes the third place.
    await poll_all(app, client, ["client=a", "client=b", "client=a&channel=beta", "client=c"])
    await flush(app, api_store)
    await poll_all(app, client, ["client=c", f"client={long_id}"])
    await flush(app, api_store)

    version = api_store.get_stable("default", PATH).version  # type: ignore[union-attr]
    assert identities(recent(api_store)) == [
        ("a", "beta", {}, version),
        ("b", None, {}, version),
        ("c", None, {}, version),
    ]
    text = (await client.get("/metrics")).text
    # client=c twice in the first round (200 and 304), then the long id at the flush.
    assert sample(text, "tempoconf_api_seen_clients_dropped_total") == 3


class _FailingStore(Store):
    """Fails to record one config's clients, as a store that is down would."""

    def record_seen_clients(self, namespace: str, path: str, clients: list[SeenClient]) -> None:
        if path == "broken/config":
            raise RuntimeError("database is down")
        super().record_seen_clients(namespace, path, clients)


async def test_a_store_error_is_logged_and_the_other_configs_are_written(
    sqlite_url: str, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    store = _FailingStore(sqlite_url, migrate=True)
    try:
        make_stable(store, PATH, {"v": 1})
        make_stable(store, "broken/config", {"v": 1})
        app = create_app(store, settings, poll_interval=0.05, seen_flush_interval=3600)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test"
            ) as http:
                await app.state.snapshot_cache.refresh()
                for path in ("broken/config", PATH):
                    assert (await http.get(f"/v1/configs/{path}?client=h")).status_code == 200
                with caplog.at_level(logging.WARNING, logger="tempoconf.api.seen"):
                    assert await flush(app, store) == 1
                assert "database is down" in caplog.text
                # Still serving, still recording.
                assert (await http.get(f"/v1/configs/{PATH}?client=h2")).status_code == 200
        assert [c.client for c in recent(store)] == ["h", "h2"]
    finally:
        store.close()


async def test_an_unchanged_client_is_not_rewritten_within_a_minute_but_a_changed_one_is(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    make_stable(api_store, PATH, {"v": 1})
    written: dict = {}
    polls = app.state.config_polls
    await poll_all(app, client)
    assert await flush_seen_clients(polls, api_store, app.state.metrics, written) == 2
    await poll_all(app, client)
    assert (
        await flush_seen_clients(polls, api_store, app.state.metrics, written) == 0
    )  # nothing new
    await poll_all(app, client, ["client=host-1&channel=beta"])  # host-1 changed its channel
    assert await flush_seen_clients(polls, api_store, app.state.metrics, written) == 1
    assert {seen.client: seen.channel for seen in recent(api_store)}["host-1"] == "beta"


async def test_a_client_asking_for_several_configs_is_seen_for_each(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    other = "myproject/other_config"
    version = make_stable(api_store, PATH, {"v": 1}).version
    other_version = make_stable(api_store, other, {"v": 2}).version
    await app.state.snapshot_cache.refresh()
    answer = await client.get(
        "/v1/configs",
        params=[("path", PATH), ("path", other), ("client", "host-9"), ("channel", "canary")],
    )
    assert answer.status_code == 200, answer.text
    anonymous = await client.get("/v1/configs", params=[("path", PATH), ("path", other)])
    assert anonymous.status_code == 200, anonymous.text

    assert await flush(app, api_store) == 2
    assert identities(recent(api_store)) == [("host-9", "canary", {}, version)]
    since = datetime.now(UTC) - timedelta(minutes=5)
    assert identities(api_store.recent_clients("default", other, since=since)) == [
        ("host-9", "canary", {}, other_version)
    ]


async def test_repeated_multi_path_requests_keep_one_pending_entry_per_config(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    other = "myproject/other_config"
    make_stable(api_store, PATH, {"v": 1})
    make_stable(api_store, other, {"v": 2})
    await app.state.snapshot_cache.refresh()
    for _ in range(5):
        answer = await client.get(
            "/v1/configs", params=[("path", PATH), ("path", other), ("client", "host-9")]
        )
        assert answer.status_code == 200, answer.text
    pending = app.state.config_polls.take_seen()
    assert sorted(query.path for query in pending) == sorted([PATH, other])


class _Connection:
    """What ConfigPolls.answer_directly needs of the protocol's connection: the answers."""

    def __init__(self) -> None:
        self.statuses: list[int] = []

    def answer(self, status: int, head_and_body: bytes) -> None:
        self.statuses.append(status)


async def test_a_client_polling_directly_is_noted_once_a_round_and_anew_when_its_answer_moves(
    app: Starlette, api_store: Store, client: httpx.AsyncClient
) -> None:
    """The direct path (a poll answered on its connection) notes a client once per round of the
    clients seen, not on every poll, and again as soon as what it is answered changes."""
    stable = make_stable(api_store, PATH, {"v": 1})
    await app.state.snapshot_cache.refresh()
    polls = app.state.config_polls
    target = f"/v1/configs/{PATH}?client=host-1&channel=canary"
    etag = (await client.get(target)).headers["etag"].encode()  # as the client's first poll
    connection = _Connection()

    def poll(etag: bytes | None = None) -> None:
        headers = [(b"host", b"x")] + ([(b"if-none-match", etag)] if etag else [])
        assert polls.answer_directly(connection, target.encode(), headers)

    def seen_versions() -> list[str]:
        return [answer.version for answer in polls.take_seen().values()]

    polls.take_seen()
    poll()
    poll(etag)
    poll(etag)
    assert connection.statuses == [200, 304, 304]
    assert seen_versions() == [stable.version], "noted once in its round"
    assert seen_versions() == [], "a round without polls notes nobody"
    poll(etag)
    assert seen_versions() == [stable.version], "noted again in the next round"

    poll(etag)  # noted in this round with the stable version: then a canary stage reaches it
    staged = start_rollout(api_store, PATH, {"v": 2})
    publish(api_store, PATH, index=0, name="channel:canary", channel="canary")
    await app.state.snapshot_cache.refresh()
    poll(etag)
    assert connection.statuses[-1] == 200
    assert seen_versions() == [staged.version], "noted anew when its answer moved"
