"""`GET /v1/changes` under an access policy (the real API over HTTP): a client token limited to
namespace A never sees namespace B's changes on the feed, and is refused (403) the feed of B;
a client that reads both sees both; no token is a 401."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable, sample
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.timeout(60)

FLEET_A = "fleet-a-secret"
EVERYONE = "everyone-secret"
SCRAPER = "scraper-secret"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path / 'origin.db'}", migrate=True)
    try:
        yield opened
    finally:
        opened.close()


async def test_a_client_sees_the_changes_of_its_namespaces_only(
    store: Store, tmp_path: Path
) -> None:
    make_stable(store, "app/limits", {"limit": 1}, namespace="team-a")
    policy = write_policy(
        tmp_path,
        clients={"fleet-a": (FLEET_A, ["team-a"]), "everyone": (EVERYONE, ["team-*"])},
        scrapers={"prometheus": SCRAPER},
    )
    async with (
        live_api(store, Settings(access_file=policy)) as origin,
        httpx.AsyncClient(base_url=origin, timeout=30) as http,
    ):

        async def changes(secret: str, **params: Any) -> dict[str, Any]:
            response = await http.get(
                "/v1/changes", params=params, headers={"Authorization": f"Bearer {secret}"}
            )
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        async def feed(name: str) -> float | None:
            text = (await http.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"})).text
            return sample(text, name)

        async def parked(wakeups: float) -> bool:
            """fleet-a's long-poll waits, after at least `wakeups` wake-ups of the feed's callers
            (a store change may reach the snapshots in more than one refresh)."""
            assert await feed("tempoconf_api_change_feed_waiting") == 1
            woken = await feed("tempoconf_api_change_feed_wakeups_total")
            assert woken is not None and woken >= wakeups, woken
            return True

        since = (await changes(FLEET_A))["revision"]

        # team-b changes: fleet-a's long-poll is woken with it (seen waiting before the change),
        # finds nothing it may read, and waits on
        held = asyncio.create_task(changes(FLEET_A, since=since, wait=60))
        await eventually(lambda: parked(0), what="fleet-a's long-poll waiting")
        make_stable(store, "app/limits", {"limit": 10}, namespace="team-b")
        await eventually(lambda: parked(1), what="fleet-a's long-poll woken by team-b, waiting on")
        assert not held.done()
        everyone = await changes(EVERYONE, since=since)
        assert everyone["changes"] == [{"namespace": "team-b", "path": "app/limits"}]

        # then team-a: fleet-a's long-poll answers with that one, and still not team-b's
        make_stable(store, "app/limits", {"limit": 2}, namespace="team-a")
        seen = await held
        assert seen["revision"] > everyone["revision"], seen
        assert seen["changes"] == [{"namespace": "team-a", "path": "app/limits"}], seen
        both = await changes(EVERYONE, since=since)  # fleet-a's answer: the API holds both
        assert both["changes"] == [
            {"namespace": "team-a", "path": "app/limits"},
            {"namespace": "team-b", "path": "app/limits"},
        ]

        # the feed of team-b, asked for by name: refused
        refused = await http.get(
            "/v1/changes",
            params={"namespace": "team-b", "since": since},
            headers={"Authorization": f"Bearer {FLEET_A}"},
        )
        assert refused.status_code == 403, refused.text
        assert "client 'fleet-a' may not read namespace 'team-b'" in refused.json()["error"]
        assert (await changes(FLEET_A, namespace="team-a"))["reset"] is True
        anonymous = await http.get("/v1/changes")
        assert anonymous.status_code == 401, anonymous.text
