"""`/metrics` under an access policy: a real Prometheus scrapes a live API with the scrape config
docs/how-to/access.md shows (its scraper token in a file: target up) and without it (down, 401);
an operator's and a client's tokens are 403s; every refusal is counted and logged. Without a
policy it stays open. An edge under its own policy asks for that policy's scraper token."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tempoconf.access.policy import PolicyError, parse_policy, secret_digest
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.cli.conftest import page
from tests.fixtures.access import write_policy
from tests.fixtures.edge import running_edge
from tests.fixtures.services import live_api, prometheus_server
from tests.fixtures.waiting import eventually

pytestmark = pytest.mark.timeout(120)

PATH = "app/limits"
SCRAPER = "prometheus-secret"
FLEET_A = "fleet-a-secret"
ALICE = "alice-secret"
GUIDE_TARGET = "127.0.0.1:8080"
GUIDE_TOKEN_FILE = "/etc/prometheus/tempoconf-scraper-token"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def two_team_policy(folder: Path) -> Path:
    return write_policy(
        folder,
        tokens={"alice": (ALICE, [(["team-a"], ["admin"])])},
        clients={"fleet-a": (FLEET_A, ["team-a"])},
        scrapers={"prometheus": SCRAPER},
    )


def guide_scrape_job() -> dict[str, Any]:
    """The scrape job docs/how-to/access.md shows, as Prometheus reads it."""
    [block] = re.findall(r"```yaml\n(.*?)```", page("how-to/access.md"), re.S)
    [job] = yaml.safe_load(block)["scrape_configs"]
    assert job["authorization"] == {"credentials_file": GUIDE_TOKEN_FILE}, job
    assert job["static_configs"] == [{"targets": [GUIDE_TARGET]}], job
    return dict(job)


def denied(metrics: str, reason: str) -> float:
    """`tempoconf_api_access_denied_total{route="/metrics", reason=...}` in a scrape's text."""
    for line in metrics.splitlines():
        if line.startswith("tempoconf_api_access_denied_total{") and (
            'route="/metrics"' in line and f'reason="{reason}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_prometheus_scrapes_under_a_policy_with_the_guides_scrape_config(
    sqlite_store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tempoconf.api.access")
    make_stable(sqlite_store, PATH, {"limit": 1}, namespace="team-a")
    make_stable(sqlite_store, PATH, {"limit": 2}, namespace="team-b")
    policy = two_team_policy(tmp_path / "policy")
    token_file = tmp_path / "tempoconf-scraper-token"
    token_file.write_text(SCRAPER + "\n")  # as `echo` writes it: Prometheus trims the newline
    async with (
        live_api(sqlite_store, Settings(access_file=policy)) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        target = url.removeprefix("http://")
        with_token = guide_scrape_job()
        with_token["authorization"] = {"credentials_file": str(token_file)}
        with_token["static_configs"] = [{"targets": [target]}]
        without = {"job_name": "no-token", "static_configs": [{"targets": [target]}]}
        jobs = yaml.safe_dump([with_token, without])
        with prometheus_server(tmp_path, target, scrape_configs=jobs) as server:

            async def targets() -> dict[str, dict[str, Any]]:
                answer = await http.get(f"{server.url}/api/v1/targets")
                active = answer.json()["data"]["activeTargets"]
                found = {t["labels"]["job"]: t for t in active}
                assert {t["health"] for t in found.values()} == {"up", "down"}, found
                return found

            found = await eventually(targets, what="both jobs scraped once", timeout=30)
            assert found["tempoconf-api"]["health"] == "up", found
            assert found["no-token"]["health"] == "down", found
            assert "401" in found["no-token"]["lastError"], found

            async def served() -> list[Any]:
                answer = await http.get(
                    f"{server.url}/api/v1/query",
                    params={"query": 'tempoconf_api_served_version{namespace="team-b"}'},
                )
                result: list[Any] = answer.json()["data"]["result"]
                assert result, answer.text
                return result

            [series] = await eventually(served, what="team-b's version in Prometheus")
            assert series["metric"]["job"] == "tempoconf-api", series

        missing = await http.get("/metrics")
        assert missing.status_code == 401, missing.text
        assert missing.headers["WWW-Authenticate"].startswith("Bearer")
        assert "scraper token" in missing.json()["error"]
        assert "team-b" not in missing.text
        operator = await http.get("/metrics", headers=bearer(ALICE))
        assert operator.status_code == 403, operator.text
        assert "this is the operator token 'alice'" in operator.json()["error"]
        assert ALICE not in operator.text
        client = await http.get("/metrics", headers=bearer(FLEET_A))
        assert client.status_code == 403, client.text
        assert "this is the client token 'fleet-a'" in client.json()["error"]
        unknown = await http.get("/metrics", headers=bearer("guessed"))
        assert unknown.status_code == 401, unknown.text
        # A scraper token opens nothing but /metrics.
        admin = await http.get(f"/v1/admin/stable/{PATH}?namespace=team-a", headers=bearer(SCRAPER))
        assert admin.status_code == 401, admin.text
        read = await http.get(f"/v1/configs/{PATH}?namespace=team-a", headers=bearer(SCRAPER))
        assert read.status_code == 401, read.text

        metrics = (await http.get("/metrics", headers=bearer(SCRAPER))).text
        assert 'tempoconf_api_served_version{namespace="team-b"' in metrics
        assert denied(metrics, "missing") >= 2  # Prometheus's no-token job, and ours
        assert denied(metrics, "operator_token") == 1
        assert denied(metrics, "client_token") == 1
        assert denied(metrics, "unknown_token") == 1
    logged = [r.getMessage() for r in caplog.records if "on /metrics" in r.getMessage()]
    assert any("access denied (missing) to an anonymous caller" in line for line in logged)
    assert any("access denied (operator_token) to alice" in line for line in logged), logged
    assert any("access denied (client_token) to fleet-a" in line for line in logged), logged


async def test_without_a_policy_metrics_stay_open_whatever_tokens_are_set(
    sqlite_store: Store,
) -> None:
    make_stable(sqlite_store, PATH, {"limit": 1}, namespace="team-a")
    settings = Settings(admin_token="admin-secret", client_token="client-secret")
    async with (
        live_api(sqlite_store, settings) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        for headers in ({}, bearer("anything"), bearer("admin-secret")):
            answer = await http.get("/metrics", headers=headers)
            assert answer.status_code == 200, answer.text
            assert 'tempoconf_api_served_version{namespace="team-a"' in answer.text


async def test_an_edge_under_its_policy_asks_for_its_own_scraper_token(
    sqlite_store: Store, tmp_path: Path
) -> None:
    make_stable(sqlite_store, PATH, {"limit": 1}, namespace="team-a")
    edge_policy = two_team_policy(tmp_path / "edge-policy")
    async with (
        live_api(sqlite_store) as origin,
        running_edge(
            origin, tmp_path, variables={"TEMPOCONF_ACCESS_FILE": str(edge_policy)}
        ) as edge,
        httpx.AsyncClient(base_url=edge.url, timeout=30) as http,
    ):
        read = await http.get(f"/v1/configs/{PATH}?namespace=team-a", headers=bearer(FLEET_A))
        assert read.status_code == 200, read.text
        assert (await http.get("/metrics")).status_code == 401
        refused = await http.get("/metrics", headers=bearer(FLEET_A))
        assert refused.status_code == 403, refused.text
        scraped = await http.get("/metrics", headers=bearer(SCRAPER))
        assert scraped.status_code == 200, scraped.text
        assert "tempoconf_edge_watches 1.0" in scraped.text
        assert denied(scraped.text, "missing") == 1
        assert denied(scraped.text, "client_token") == 1
        # Its /readyz says which policy is in force, as the API's does.
        ready = (await http.get("/readyz")).json()
        assert ready["access_policy"]["status"] == "current", ready
        assert "tempoconf_api_access_policy_stale 0.0" in scraped.text


def test_a_scraper_is_named_once_and_shares_no_secret(tmp_path: Path) -> None:
    digest = "a" * 64
    with pytest.raises(PolicyError) as raised:
        parse_policy(
            {
                "clients": [{"name": "fleet", "secret_sha256": digest, "namespaces": ["a"]}],
                "scrapers": [
                    {"name": "prometheus", "secret_sha256": digest},
                    {"name": "prometheus", "secret_sha256": "b" * 64},
                    {"name": "vm", "secret_sha256": "c" * 64, "namespaces": ["a"]},
                ],
            },
            source=tmp_path / "access.json",
        )
    problems = "\n".join(raised.value.problems)
    assert "/scrapers/2: Additional properties are not allowed" in problems, problems
    policy = parse_policy(
        {"scrapers": [{"name": "prometheus", "secret_sha256": secret_digest(SCRAPER).hex()}]},
        source=tmp_path / "access.json",
    )
    found = policy.scraper(SCRAPER.encode())
    assert found is not None and found.name == "prometheus"
    assert policy.scraper(b"guess") is None
    with pytest.raises(PolicyError) as twice:
        parse_policy(
            {
                "clients": [{"name": "fleet", "secret_sha256": digest, "namespaces": ["a"]}],
                "scrapers": [
                    {"name": "prometheus", "secret_sha256": digest},
                    {"name": "prometheus", "secret_sha256": "b" * 64},
                ],
            },
            source=tmp_path / "access.json",
        )
    problems = "\n".join(twice.value.problems)
    assert "/scrapers/0/secret_sha256: the same secret as /clients/0" in problems, problems
    assert "/scrapers/1/name: 'prometheus' is named twice in scrapers" in problems, problems
