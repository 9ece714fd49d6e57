"""`tempoconf edge` (a real subprocess) between the origin API (live, over a store) and clients:
its clients see a canary, a promotion and a halt as the origin's would, long-polls included;
reports reach the origin; an edge chained behind an edge works; an edge whose origin is down
keeps serving what it holds; admin routes are refused with a pointer to the origin."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tempoconf.canonical import version_id
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import client_in, make_stable, publish, sample, start_rollout
from tests.fixtures.edge import running_edge
from tests.fixtures.services import free_port, live_api
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually
from tests.store.helpers import report_sums
from tests.workflows.test_rollout import make_stable as rollout_stable
from tests.workflows.test_rollout import wait_for_state

STABLE = {"max_connections": 1000}
CANARY = {"max_connections": 2000}
HALTED = {"max_connections": 3000}
ORIGIN_TOKEN = "origin-client-token"
EDGE_TOKEN = "edge-client-token"
LEASE_SECONDS = 8


async def read(http: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    response = await http.get(f"/v1/configs/{path}", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def reads(http: httpx.AsyncClient, path: str, value: Any, **params: Any) -> None:
    async def check() -> bool:
        got = await read(http, path, **params)
        assert got["value"] == value, got
        return True

    await eventually(check, what=f"{params} to read {value} through the edge")


async def test_edge_clients_follow_a_real_rollout_canary_promotion_and_halt(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> None:
    path = f"edge/server_config_{uuid.uuid4().hex[:8]}"
    await rollout_stable(rollout_harness, path, STABLE)
    async with (
        live_api(rollout_harness.store, Settings(client_token=ORIGIN_TOKEN)) as origin,
        running_edge(
            origin, tmp_path, client_token=EDGE_TOKEN, upstream_token=ORIGIN_TOKEN
        ) as edge,
        httpx.AsyncClient(
            base_url=edge.url, headers={"Authorization": f"Bearer {EDGE_TOKEN}"}, timeout=30
        ) as http,
    ):
        canary = {"client": "canary-1", "channel": "canary"}
        other = {"client": "web-7"}
        assert (await read(http, path, **other))["value"] == STABLE

        # A long-poll held by the edge for the canary: the publish upstream answers it.
        first = await http.get(f"/v1/configs/{path}", params=canary)
        held = asyncio.create_task(
            http.get(
                f"/v1/configs/{path}",
                params={**canary, "wait": 25},
                headers={"If-None-Match": first.headers["etag"]},
            )
        )
        handle = await rollout_harness.start(
            {
                "path": path, "value": CANARY, "default_cooldown_time": "1h",
                "stages": [{"channel": "canary"}, {"percentile": 50}],
            },
            real_clock=True,
        )  # fmt: skip
        await wait_for_state(handle, "holding", stage_index=0)
        woken = await held
        assert woken.status_code == 200, woken.text
        assert (woken.json()["value"], woken.json()["stage"]) == (CANARY, "channel:canary")
        assert (await read(http, path, **other))["value"] == STABLE  # the canary's only

        # promotion reaches every client of the edge
        await handle.execute_update("advance")
        await wait_for_state(handle, "holding", stage_index=1)
        await handle.execute_update("advance")
        assert (await rollout_result(handle))["outcome"] == "promoted"
        await reads(http, path, CANARY, **other)
        await reads(http, path, CANARY, **canary)

        # a halt puts the canary back on stable
        halted = await rollout_harness.start(
            {"path": path, "value": HALTED, "default_cooldown_time": "1h",
             "stages": [{"channel": "canary"}]},
            real_clock=True,
        )  # fmt: skip
        await wait_for_state(halted, "holding", stage_index=0)
        await reads(http, path, HALTED, **canary)
        await halted.execute_update("halt", {"reason": "error rate up"})
        assert (await rollout_result(halted))["outcome"] == "halted"
        got = await eventually(
            lambda: _stage_is(http, path, "stable", canary), what="the canary back on stable"
        )
        assert got["value"] == CANARY

        refused = await http.get(f"/v1/configs/{path}", headers={"Authorization": "Bearer wrong"})
        assert refused.status_code == 401


async def _stage_is(
    http: httpx.AsyncClient, path: str, stage: str, params: dict[str, Any]
) -> dict[str, Any]:
    got = await read(http, path, **params)
    assert got["stage"] == stage, got
    return got


async def test_a_chained_edge_serves_stages_bundles_and_reports_and_outlives_its_origin(
    api_store: Store, tmp_path: Path
) -> None:
    path = f"edge/chained_{uuid.uuid4().hex[:8]}"
    stable = make_stable(api_store, path, STABLE)
    staged = start_rollout(api_store, path, CANARY)
    stage = publish(api_store, path, index=0, name="30%", percentile=30)
    inside = client_in(path, 30, inside=True)
    outside = client_in(path, 30, inside=False)
    origin_context = live_api(api_store, Settings(client_token=ORIGIN_TOKEN))
    origin = await origin_context.__aenter__()
    try:
        inner_port = free_port()
        async with (
            contextlib.AsyncExitStack() as edges,
            httpx.AsyncClient(
                base_url=origin, headers={"Authorization": f"Bearer {ORIGIN_TOKEN}"}
            ) as at_origin,
        ):
            # Both start at once (an edge serves /healthz before its upstream answers).
            edge1, edge2 = await asyncio.gather(
                edges.enter_async_context(
                    running_edge(
                        origin, tmp_path, name="edge1", port=inner_port,
                        client_token=EDGE_TOKEN, upstream_token=ORIGIN_TOKEN,
                    )
                ),
                edges.enter_async_context(
                    # The outer edge serves its clients without a token: on purpose, as it
                    # must say (else it refuses to re-serve what EDGE_TOKEN reads to anyone).
                    running_edge(
                        f"http://127.0.0.1:{inner_port}", tmp_path, name="edge2",
                        upstream_token=EDGE_TOKEN, extra=("--public",),
                    )
                ),
            )  # fmt: skip
            http = await edges.enter_async_context(
                httpx.AsyncClient(base_url=edge2.url, timeout=30)
            )
            # the cohort gets the stage, the others stable: exactly the origin's answers
            for client, version in ((inside, staged.version), (outside, stable.version)):
                through = await http.get(f"/v1/configs/{path}", params={"client": client})
                direct = await at_origin.get(f"/v1/configs/{path}", params={"client": client})
                assert through.status_code == direct.status_code == 200
                assert through.json()["version"] == version
                assert through.json() == direct.json()
                assert through.headers["etag"] == direct.headers["etag"]
            both = await http.get("/v1/configs", params={"path": path, "client": inside})
            assert (
                both.status_code == 200 and both.json()["configs"][0]["version"] == staged.version
            )

            # the bundle: the origin's bytes and ETag, two hops away
            bundle = await http.get(f"/v1/bundles/{path}")
            direct_bundle = await at_origin.get(f"/v1/bundles/{path}")
            assert bundle.status_code == 200, bundle.text
            assert bundle.content == direct_bundle.content
            assert bundle.headers["etag"] == direct_bundle.headers["etag"]
            assert [s["name"] for s in bundle.json()["stages"]] == [stage.name]

            # unknown config: the origin's 404; admin: refused, naming the origin's role
            missing = await http.get(f"/v1/configs/{path}-missing", params={"client": inside})
            assert missing.status_code == 404 and "unknown config" in missing.json()["error"]
            admin = await http.get(f"/v1/admin/versions/{path}")
            assert admin.status_code == 421 and "edge" in admin.json()["error"]

            # reports sent to the outer edge reach the origin (batched), merged per client
            since = datetime.now(UTC) - timedelta(minutes=1)
            for ok, failed in ((5, 1), (3, 0)):
                report = {
                    "path": path, "client": inside, "version": staged.version,
                    "ok": ok, "failed": failed,
                }  # fmt: skip
                sent = await http.post("/v1/reports", json=report)
                assert sent.status_code == 202, sent.text
            bad = await http.post("/v1/reports", json={"path": path, "ok": 1})
            assert bad.status_code == 400
            unknown = {"path": path, "client": inside, "version": "0" * 16, "ok": 1, "failed": 0}
            assert (await http.post("/v1/reports", json=unknown)).status_code == 404

            async def reported() -> bool:
                stats = await asyncio.to_thread(
                    report_sums, api_store, "default", path, staged.version, since=since
                )
                assert (stats.clients, stats.ok, stats.failed) == (1, 8, 1), stats
                return True

            await eventually(reported, what="the reports at the origin")

            # a promotion at the origin reaches a long-poll held by the outer edge
            etag = (await http.get(f"/v1/configs/{path}", params={"client": outside})).headers[
                "etag"
            ]
            held = asyncio.create_task(
                http.get(
                    f"/v1/configs/{path}",
                    params={"client": outside, "wait": 25},
                    headers={"If-None-Match": etag},
                )
            )
            await asyncio.sleep(0.2)
            api_store.promote(
                "default", path, run_id="run-1", workflow_id=f"rollout:default/{path}",
                version=staged.version, actor="tests", reason="done", event_key="promote-1",
            )  # fmt: skip
            woken = await held
            assert woken.status_code == 200 and woken.json()["version"] == staged.version

            # a canary stage on a short lease, then the origin goes away: both edges keep
            # serving what they hold, and the stage ends with its lease, by the edge's clock
            canary = {"client": outside, "channel": "canary"}
            short = start_rollout(api_store, path, HALTED, run_id="run-2")
            publish(
                api_store, path, index=0, name="canary", channel="canary",
                expires_in=timedelta(seconds=LEASE_SECONDS), run_id="run-2",
            )  # fmt: skip
            await reads(http, path, HALTED, **canary)
            await origin_context.__aexit__(None, None, None)
            origin_context = None
            for client in (inside, outside):
                got = await http.get(f"/v1/configs/{path}", params={"client": client})
                assert got.status_code == 200 and got.json()["version"] == staged.version
            assert (await read(http, path, **canary))["version"] in (short.version, staged.version)
            ended = await eventually(
                lambda: _stage_is(http, path, "stable", canary),
                what="the canary stage to end with its lease",
                timeout=LEASE_SECONDS + 10,
            )
            assert ended["version"] == staged.version
            async with httpx.AsyncClient(base_url=edge1.url) as inner:

                async def stale() -> dict[str, Any]:
                    ready = await inner.get("/readyz")
                    assert ready.status_code == 200, ready.text
                    assert "error" in ready.json(), ready.json()
                    return dict(ready.json())

                answer = await eventually(stale, what="edge1 to notice its upstream is gone")
                assert answer["snapshot_age_seconds"] >= 0
                metrics = (await inner.get("/metrics")).text
                # the config, and the unknown one asked for (404s are watched too, for a while)
                assert sample(metrics, "tempoconf_edge_watches") == 2.0
            assert version_id(CANARY) == staged.version
    finally:
        if origin_context is not None:
            await origin_context.__aexit__(None, None, None)
