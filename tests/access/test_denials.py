"""Refusals are counted every time, once each, and logged once per caller and reason a minute: a
client retrying a wrong token in a loop must not flood the log, nor hide a second caller's
refusal."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import httpx
import pytest

from tempoconf.api.access import AccessDenials
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api


def test_each_refusal_counts_and_each_caller_is_logged_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    denials = AccessDenials(clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="tempoconf.api.access")
    for _ in range(100):
        error = denials.deny(401, "/v1/configs/{path}", "unknown_token", "an unknown token", "no")
    assert error.status == 401 and error.headers["WWW-Authenticate"].startswith("Bearer")
    denials.deny(403, "/v1/configs/{path}", "namespace", "fleet-a", "fleet-a may not read x")
    now[0] = 59.0
    denials.deny(403, "/v1/configs/{path}", "namespace", "fleet-a", "fleet-a may not read x")
    now[0] = 61.0
    denials.deny(401, "/v1/configs/{path}", "unknown_token", "an unknown token", "no")
    assert denials.counts[("/v1/configs/{path}", "unknown_token")] == 101
    assert denials.counts[("/v1/configs/{path}", "namespace")] == 2
    logged = [record.getMessage() for record in caplog.records]
    assert len(logged) == 3, logged
    assert sum("fleet-a" in line for line in logged) == 1
    assert "403" not in logged[1] and "fleet-a may not read x" in logged[1]


async def test_a_poll_refused_on_the_real_server_is_counted_once(
    tmp_path: Path, sqlite_store: Store
) -> None:
    """A config or bundle GET is first offered to the direct path (api/lean_protocol.py), which
    declines what access refuses, and the ASGI path then refuses it: counted there, once."""
    make_stable(sqlite_store, "app/config", {"v": 1}, namespace="team-a")
    make_stable(sqlite_store, "app/config", {"v": 2}, namespace="team-b")
    policy = write_policy(
        tmp_path,
        clients={"fleet-a": ("fleet-a-secret", ["team-a"])},
        scrapers={"prometheus": "prometheus-secret"},
    )
    async with (
        live_api(sqlite_store, Settings(access_file=policy)) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        fleet_a = {"Authorization": "Bearer fleet-a-secret"}
        ok = await http.get("/v1/configs/app/config?namespace=team-a", headers=fleet_a)
        assert ok.status_code == 200 and ok.json()["value"] == {"v": 1}, ok.text
        for route in ("/v1/configs/app/config", "/v1/bundles/app/config"):
            missing = await http.get(f"{route}?namespace=team-a")
            assert missing.status_code == 401, missing.text
            elsewhere = await http.get(f"{route}?namespace=team-b", headers=fleet_a)
            assert elsewhere.status_code == 403, elsewhere.text
            assert "may not read namespace 'team-b'" in elsewhere.json()["error"]
        scraper = {"Authorization": "Bearer prometheus-secret"}
        metrics = (await http.get("/metrics", headers=scraper)).text

    counted = {
        (match["route"], match["reason"]): float(match["count"])
        for match in re.finditer(
            r'tempoconf_api_access_denied_total\{reason="(?P<reason>\w+)",'
            r'route="(?P<route>[^"]+)"\} (?P<count>[\d.]+)',
            metrics,
        )
    }
    assert counted == {
        ("/v1/configs/{path}", "missing"): 1.0,
        ("/v1/configs/{path}", "namespace"): 1.0,
        ("/v1/bundles/{path}", "missing"): 1.0,
        ("/v1/bundles/{path}", "namespace"): 1.0,
    }, metrics
