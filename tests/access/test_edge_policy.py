"""`tempoconf edge` (a real subprocess) under an access policy of its own, in front of an origin
API (live, over a store) under another: the edge's clients read and report in their namespaces
only (403 elsewhere, 401 without a token, 403 for an operator's token), through an upstream
token that is a client of the origin's policy covering both; a long-poll through the edge gets
the change made at the origin; SIGHUP makes the edge read its policy again."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable, sample
from tests.fixtures.access import write_policy
from tests.fixtures.edge import running_edge
from tests.fixtures.services import live_api
from tests.fixtures.waiting import eventually
from tests.store.helpers import report_sums

pytestmark = pytest.mark.timeout(120)

PATH = "app/limits"
UPSTREAM_SECRET = "edge-upstream-secret"
FLEET_A = "fleet-a-secret"
FLEET_B = "fleet-b-secret"
OPERATOR = "alice-secret"
SCRAPER = "scraper-secret"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(f"sqlite:///{tmp_path / 'origin.db'}", migrate=True)
    try:
        yield opened
    finally:
        opened.close()


async def test_edge_clients_read_and_report_in_their_namespaces_only(
    store: Store, tmp_path: Path
) -> None:
    a1 = make_stable(store, PATH, {"limit": 1}, namespace="team-a")
    b1 = make_stable(store, PATH, {"limit": 10}, namespace="team-b")
    origin_policy = write_policy(
        tmp_path / "origin",
        tokens={"root": ("root-secret", [(["*"], ["admin"])])},
        clients={"edge-1": (UPSTREAM_SECRET, ["team-a", "team-b"])},
    )
    edge_policy = write_policy(
        tmp_path / "edge",
        tokens={"alice": (OPERATOR, [(["team-a"], ["operator"])])},
        clients={"fleet-a": (FLEET_A, ["team-a"]), "fleet-b": (FLEET_B, ["team-b"])},
        scrapers={"prometheus": SCRAPER},
    )
    since = datetime.now(UTC) - timedelta(minutes=1)
    async with (
        live_api(store, Settings(access_file=origin_policy)) as origin,
        running_edge(
            origin,
            tmp_path,
            upstream_token=UPSTREAM_SECRET,
            variables={"TEMPOCONF_ACCESS_FILE": str(edge_policy)},
        ) as edge,
        httpx.AsyncClient(base_url=edge.url, timeout=30) as http,
    ):

        async def read(secret: str | None, namespace: str, **params: str) -> httpx.Response:
            return await http.get(
                f"/v1/configs/{PATH}",
                params={"namespace": namespace, "client": "host-1", **params},
                headers=bearer(secret) if secret else {},
            )

        # fleet-a reads team-a's config through the edge, not team-b's; fleet-b the other way
        mine = await read(FLEET_A, "team-a")
        assert mine.status_code == 200, mine.text
        assert (mine.json()["value"], mine.json()["version"]) == ({"limit": 1}, a1.version)
        theirs = await read(FLEET_A, "team-b")
        assert theirs.status_code == 403, theirs.text
        assert "client 'fleet-a' may not read namespace 'team-b'" in theirs.json()["error"]
        assert (await read(FLEET_B, "team-b")).json()["version"] == b1.version
        assert (await read(FLEET_B, "team-a")).status_code == 403

        # no token, an unknown one, an operator's: refused, and nothing watched upstream for them
        missing = await read(None, "team-a")
        assert missing.status_code == 401 and "missing bearer token" in missing.json()["error"]
        assert (await read("nobody-secret", "team-a")).status_code == 401
        operator = await read(OPERATOR, "team-a")
        assert operator.status_code == 403, operator.text
        assert "this is the operator token 'alice'" in operator.json()["error"]
        bundle = await http.get(
            f"/v1/bundles/{PATH}", params={"namespace": "team-b"}, headers=bearer(FLEET_A)
        )
        assert bundle.status_code == 403, bundle.text

        # reports: fleet-a's in team-a accepted and forwarded; in team-b refused
        def report(namespace: str, version: str) -> dict[str, object]:
            return {
                "path": PATH, "namespace": namespace, "client": "host-1",
                "version": version, "ok": 4, "failed": 1,
            }  # fmt: skip

        sent = await http.post(
            "/v1/reports", json=report("team-a", a1.version), headers=bearer(FLEET_A)
        )
        assert sent.status_code == 202, sent.text
        refused = await http.post(
            "/v1/reports", json=report("team-b", b1.version), headers=bearer(FLEET_A)
        )
        assert refused.status_code == 403, refused.text
        assert (
            await http.post("/v1/reports", json=report("team-a", a1.version))
        ).status_code == 401

        async def reported() -> bool:
            sums = await asyncio.to_thread(
                report_sums, store, "team-a", PATH, a1.version, since=since
            )
            assert (sums.clients, sums.ok, sums.failed) == (1, 4, 1), sums
            return True

        await eventually(reported, what="fleet-a's report at the origin")
        others = await asyncio.to_thread(
            report_sums, store, "team-b", PATH, b1.version, since=since
        )
        assert (others.clients, others.ok, others.failed) == (0, 0, 0), others

        # a long-poll of fleet-a's, held by the edge (seen waiting there before the change),
        # answered by a change at the origin: woken, not answered at its deadline
        async def edge_metric(name: str) -> float | None:
            text = (await http.get("/metrics", headers=bearer(SCRAPER))).text
            return sample(text, name)

        wakeups = await edge_metric("tempoconf_api_long_poll_wakeups_total") or 0
        held = asyncio.create_task(
            http.get(
                f"/v1/configs/{PATH}",
                params={"namespace": "team-a", "client": "host-1", "wait": "60"},
                headers={**bearer(FLEET_A), "If-None-Match": mine.headers["etag"]},
            )
        )

        async def parked() -> bool:
            assert await edge_metric("tempoconf_api_long_polls_waiting") == 1
            return True

        await eventually(parked, what="fleet-a's long-poll held by the edge")
        assert not held.done()
        a2 = await asyncio.to_thread(make_stable, store, PATH, {"limit": 2}, namespace="team-a")
        woken = await held
        assert await edge_metric("tempoconf_api_long_poll_wakeups_total") == wakeups + 1
        assert woken.status_code == 200, woken.text
        assert (woken.json()["value"], woken.json()["version"]) == ({"limit": 2}, a2.version)

        # SIGHUP: the edge reads its policy again (rotated in place, its stamp kept: only the
        # signal can explain the change), and serves on
        rotated = write_policy(
            tmp_path / "rotated",
            tokens={"alice": (OPERATOR, [(["team-a"], ["operator"])])},
            clients={"fleet-a": (FLEET_A, ["team-a"]), "fleet-b": ("fleet-b-rotated", ["team-b"])},
            scrapers={"prometheus": SCRAPER},
        )
        before = os.stat(edge_policy)
        with open(edge_policy, "r+b") as file:
            file.write(rotated.read_bytes())
        os.utime(edge_policy, ns=(before.st_atime_ns, before.st_mtime_ns))
        await asyncio.sleep(1.5)
        assert (await read(FLEET_B, "team-b")).status_code == 200
        edge.process.send_signal(signal.SIGHUP)

        async def rotated_in() -> bool:
            assert (await read("fleet-b-rotated", "team-b")).status_code == 200
            return True

        await eventually(rotated_in, what="the edge's policy reloaded")
        assert (await read(FLEET_B, "team-b")).status_code == 401
        assert edge.process.poll() is None, edge.log()
