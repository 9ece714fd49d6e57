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
from tests.api.helpers import make_stable
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api

pytestmark = pytest.mark.timeout(60)

FLEET_A = "fleet-a-secret"
EVERYONE = "everyone-secret"


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

        since = (await changes(FLEET_A))["revision"]

        # team-b changes: fleet-a's long-poll is not woken with it; its wait runs out, empty
        held = asyncio.create_task(changes(FLEET_A, since=since, wait=2))
        await asyncio.sleep(0.2)
        make_stable(store, "app/limits", {"limit": 10}, namespace="team-b")
        mine = await held
        assert mine["changes"] == [] and mine["revision"] > since, mine
        everyone = await changes(EVERYONE, since=since)
        assert everyone["changes"] == [{"namespace": "team-b", "path": "app/limits"}]

        # then team-a: fleet-a sees that one, and still not team-b's
        make_stable(store, "app/limits", {"limit": 2}, namespace="team-a")
        seen = await changes(FLEET_A, since=since, wait=10)
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
