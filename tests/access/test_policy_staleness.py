"""A policy file that no longer loads, on a live API: `/readyz` (still 200) says an older policy
is in force, since when, and where the file is wrong, without the file's values (a secret pasted
where its digest belongs stays out of the answer); `/metrics` counts the failed reloads and says
the policy is stale, and when the one in force was loaded. Fixed, all of it says current again.
Without a policy, `/readyz` is as before."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.timeout(120)

PATH = "app/limits"
FLEET = "fleet-a-secret"
SCRAPER = "prometheus-secret"
PASTED = "hunter2-the-fleets-real-secret"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def metric(text: str, name: str) -> float:
    [value] = [
        float(line.split(" ")[1]) for line in text.splitlines() if line.startswith(name + " ")
    ]
    return value


async def test_a_broken_policy_file_is_said_in_readyz_and_metrics(
    sqlite_store: Store, tmp_path: Path
) -> None:
    make_stable(sqlite_store, PATH, {"limit": 1}, namespace="team-a")
    policy = write_policy(
        tmp_path / "policy",
        clients={"fleet-a": (FLEET, ["team-a"])},
        scrapers={"prometheus": SCRAPER},
    )
    good = policy.read_text()
    async with (
        live_api(sqlite_store, Settings(access_file=policy)) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):

        async def ready() -> dict[str, Any]:
            answer = await http.get("/readyz")
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            return body

        async def metrics() -> str:
            return (await http.get("/metrics", headers=bearer(SCRAPER))).text

        first = (await ready())["access_policy"]
        assert first["status"] == "current" and first["failed_reloads"] == 0, first
        assert "failing_since" not in first and "error" not in first, first
        loaded_at = datetime.fromisoformat(first["loaded_at"])
        text = await metrics()
        assert metric(text, "tempoconf_api_access_policy_stale") == 0
        assert metric(text, "tempoconf_api_access_policy_reload_failures_total") == 0
        assert metric(text, "tempoconf_api_access_policy_loaded_timestamp_seconds") == (
            loaded_at.timestamp()
        )

        # The fleet's secret pasted where its digest belongs, and a key misspelt.
        broken = json.loads(good)
        broken["clients"][0]["secret_sha256"] = PASTED
        broken["clients"][0]["namespace"] = ["team-b"]
        policy.write_text(json.dumps(broken))

        async def stale() -> dict[str, Any]:
            body = await ready()
            assert body["access_policy"]["status"] == "stale", body
            return body

        body = await eventually(stale, what="/readyz to say the policy is stale", timeout=30)
        assert body["status"] == "ready", body
        said = body["access_policy"]
        assert PASTED not in json.dumps(body), body
        assert said["loaded_at"] == first["loaded_at"], said
        since = datetime.fromisoformat(said["failing_since"])
        assert since > loaded_at, said
        assert said["failed_reloads"] == 1, said
        error = said["error"]
        assert error.startswith("the access policy file does not load (2 problem(s): "), error
        assert "/clients/0: Additional properties are not allowed" in error, error
        assert "/clients/0/secret_sha256: … does not match …" in error, error
        assert f"the policy read at {first['loaded_at']} stays in force" in error, error
        # ... and it is: the fleet reads with its token, as the older policy says.
        read = await http.get(f"/v1/configs/{PATH}?namespace=team-a", headers=bearer(FLEET))
        assert read.status_code == 200, read.text
        text = await metrics()
        assert metric(text, "tempoconf_api_access_policy_stale") == 1
        assert metric(text, "tempoconf_api_access_policy_reload_failures_total") == 1
        assert metric(text, "tempoconf_api_access_policy_loaded_timestamp_seconds") == (
            loaded_at.timestamp()
        )

        # Broken another way: counted again; failing since the first failure still.
        policy.write_text(good[:-10])

        async def failed_twice() -> dict[str, Any]:
            said: dict[str, Any] = (await stale())["access_policy"]
            assert said["failed_reloads"] == 2, said
            return said

        said = await eventually(failed_twice, what="the second failure", timeout=30)
        assert said["failing_since"] == since.isoformat(), said
        assert "not JSON: " in said["error"], said

        policy.write_text(good + "\n")

        async def current() -> dict[str, Any]:
            said: dict[str, Any] = (await ready())["access_policy"]
            assert said["status"] == "current", said
            return said

        said = await eventually(current, what="the fixed file in force", timeout=30)
        assert "failing_since" not in said and "error" not in said, said
        assert datetime.fromisoformat(said["loaded_at"]) > since, said
        text = await metrics()
        assert metric(text, "tempoconf_api_access_policy_stale") == 0
        assert metric(text, "tempoconf_api_access_policy_reload_failures_total") == 2


async def test_without_a_policy_readyz_says_nothing_of_one(sqlite_store: Store) -> None:
    async with (
        live_api(sqlite_store) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        body = (await http.get("/readyz")).json()
        assert body["status"] == "ready" and "access_policy" not in body, body
        text = (await http.get("/metrics")).text
        assert "tempoconf_api_access_policy" not in text
