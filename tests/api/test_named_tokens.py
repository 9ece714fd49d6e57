"""Named admin tokens (TEMPOCONF_ADMIN_TOKENS) over real HTTP, against a real Temporal server and
worker: the API acts as the token's name, refuses a body `by` naming someone else, and so counts
four-eyes approvals by who called; the single TEMPOCONF_ADMIN_TOKEN works as before."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tempoconf.settings import Settings
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.workflows.test_approvals import digest_of, four_eyes_request, unique_path
from tests.workflows.test_rollout import status, wait_for_state

TOKENS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
SHARED = "shared-secret"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_the_tokens_name_is_who_approves(
    rollout_harness: RolloutHarness, tmp_path: Any
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        temporal_address=rollout_harness.env.client.service_client.config.target_host,
        task_queue=rollout_harness.task_queue,
        admin_token=SHARED,
        admin_tokens=tuple(TOKENS.items()),
    )
    path = unique_path()
    request = four_eyes_request(path)
    digest = digest_of(request)
    async with live_api(rollout_harness.store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:

            async def approve(who: str, body: dict[str, Any]) -> httpx.Response:
                return await http.post(
                    f"/v1/admin/rollouts/{path}:approve", json=body, headers=bearer(TOKENS[who])
                )

            planned = await http.post(
                "/v1/admin/plans", json=request, headers=bearer(TOKENS["bob"])
            )
            assert planned.status_code == 200, planned.text
            assert planned.json()["digest"] == digest

            handle = await rollout_harness.start(request)
            await wait_for_state(handle, "awaiting_approval", stage_index=0)

            wrong = await http.post(
                f"/v1/admin/rollouts/{path}:approve", json={}, headers=bearer("nobody")
            )
            assert wrong.status_code == 401

            # bob's token speaks for bob only
            impostor = await approve("bob", {"by": "carol", "digest": digest})
            assert impostor.status_code == 403, impostor.text
            assert "this caller is 'bob'" in impostor.json()["error"]
            assert "'carol' names someone else" in impostor.json()["error"]

            # the author's token: refused, even with no `by` in the body
            own = await approve("alice", {"digest": digest})
            assert own.status_code == 409
            assert "alice is the rollout's author (alice@example.com)" in own.json()["error"]

            first = await approve("bob", {"digest": digest, "reason": "reviewed"})
            assert first.status_code == 200, first.text
            assert first.json()["state"] == "awaiting_approval"
            assert [a["by"] for a in (await status(handle))["approvals"]] == ["bob"]
            again = await approve("bob", {"by": "bob", "digest": digest})
            assert again.status_code == 409
            assert "bob approved it already (1/2)" in again.json()["error"]

            stale = digest_of(four_eyes_request(path, value={"max_connections": 1}))
            outdated = await approve("carol", {"digest": stale})
            assert outdated.status_code == 409
            assert stale in outdated.json()["error"] and digest in outdated.json()["error"]

            # the single shared token names nobody: a body `by` is kept, as before
            paused = await http.post(
                f"/v1/admin/rollouts/{path}:pause",
                json={"by": "dave", "reason": "lunch"},
                headers=bearer(SHARED),
            )
            assert paused.status_code == 200, paused.text
            resumed = await http.post(
                f"/v1/admin/rollouts/{path}:resume", headers=bearer(TOKENS["carol"])
            )
            assert resumed.status_code == 200, resumed.text
            history = (await status(handle))["history"]
            assert [row["by"] for row in history if row["reason"].startswith(("pause", "resume"))] == [
                "dave", "carol",
            ]  # fmt: skip

            second = await approve("carol", {"digest": digest})
            assert second.status_code == 200, second.text
            assert (await rollout_result(handle))["outcome"] == "promoted"


async def test_the_starter_is_the_token_and_cannot_approve_under_another_author(
    rollout_harness: RolloutHarness, tmp_path: Any
) -> None:
    """alice's token starts a four-eyes rollout naming mallory as its author: the start is
    recorded as alice's, alice cannot approve it (she started it), nor can mallory (she is named
    its author); bob and carol can."""
    settings = Settings(
        data_dir=tmp_path,
        temporal_address=rollout_harness.env.client.service_client.config.target_host,
        task_queue=rollout_harness.task_queue,
        admin_tokens=(*TOKENS.items(), ("mallory", "mallory-secret")),
    )
    path = unique_path()
    request = four_eyes_request(path, author="mallory@example.com")
    digest = digest_of(request)
    async with live_api(rollout_harness.store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            forged = await http.post(
                "/v1/admin/rollouts",
                json={**request, "started_by": "bob"},
                headers=bearer(TOKENS["alice"]),
            )
            assert forged.status_code == 403, forged.text
            assert "this caller is 'alice'" in forged.json()["error"]
            # the plan reviewed by bob has the digest of the start by alice
            planned = await http.post(
                "/v1/admin/plans", json=request, headers=bearer(TOKENS["bob"])
            )
            assert planned.json()["digest"] == digest, planned.text
            started = await http.post(
                "/v1/admin/rollouts", json=request, headers=bearer(TOKENS["alice"])
            )
            assert started.status_code == 202, started.text
            handle = rollout_harness.client.get_workflow_handle(started.json()["workflow_id"])
            await wait_for_state(handle, "awaiting_approval", stage_index=0)

            async def approve(who: str, secret: str) -> httpx.Response:
                return await http.post(
                    f"/v1/admin/rollouts/{path}:approve",
                    json={"digest": digest},
                    headers=bearer(secret),
                )

            own = await approve("alice", TOKENS["alice"])
            assert own.status_code == 409, own.text
            assert "alice is the rollout's starter (alice)" in own.json()["error"]
            named = await approve("mallory", "mallory-secret")
            assert named.status_code == 409, named.text
            assert "mallory is the rollout's author (mallory@example.com)" in named.json()["error"]
            assert (await approve("bob", TOKENS["bob"])).status_code == 200
            assert (await approve("carol", TOKENS["carol"])).status_code == 200
            assert (await rollout_result(handle))["outcome"] == "promoted"
            history = await http.get(f"/v1/admin/history/{path}", headers=bearer(TOKENS["bob"]))
            [start] = [e for e in history.json()["entries"] if e["action"] == "rollout.started"]
            assert start["actor"] == "alice", start
            assert start["details"]["author"] == "mallory@example.com", start


def _writes_naming_someone(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(method, path, field) of every admin write in the OpenAPI document whose body has a field
    naming who acts (`by`, or a rollout request's `started_by`)."""
    components = document["components"]["schemas"]

    def properties(schema: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in schema:
            return properties(components[schema["$ref"].rsplit("/", 1)[1]])
        found = dict(schema.get("properties") or {})
        for part in schema.get("allOf", []) + schema.get("anyOf", []) + schema.get("oneOf", []):
            found.update(properties(part))
        return found

    writes = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in ("post", "put", "patch", "delete") or not path.startswith("/v1/admin"):
                continue
            content = (operation.get("requestBody") or {}).get("content", {})
            schema = (content.get("application/json") or {}).get("schema")
            if schema is None:
                continue
            fields = properties(schema)
            for field in ("by", "started_by"):
                if field in fields:
                    writes.append((method.upper(), path, field))
    return writes


async def test_a_body_naming_someone_else_is_refused_on_every_admin_write(
    tmp_path: Any,
) -> None:
    from tempoconf.store.store import Store

    settings = Settings(data_dir=tmp_path, admin_tokens=tuple(TOKENS.items()))
    store = Store(f"sqlite:///{tmp_path / 'store.db'}", migrate=True)
    async with live_api(store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            document = (await http.get("/openapi.json")).json()
            writes = _writes_naming_someone(document)
            templates = {path for _, path, _ in writes}
            assert {"/v1/admin/freezes", "/v1/admin/rollouts", "/v1/admin/plans"} <= templates
            assert any(path.startswith("/v1/admin/schemas/") for path in templates), templates
            assert sum(path.endswith(":halt") for path in templates) == 1, templates
            for method, template, field in writes:
                path = template.replace("{namespace}", "team").replace("{path}", "team/app")
                answer = await http.request(
                    method, path, json={field: "carol"}, headers=bearer(TOKENS["bob"])
                )
                assert answer.status_code == 403, (method, path, answer.text)
                assert "this caller is 'bob'" in answer.json()["error"]
                assert f"body's {field} 'carol' names someone else" in answer.json()["error"]

            # and what is written names the token: a freeze and its end, a schema
            frozen = await http.post(
                "/v1/admin/freezes",
                json={"namespace": "team", "reason": "release"},
                headers=bearer(TOKENS["bob"]),
            )
            assert frozen.status_code == 201, frozen.text
            ended = await http.post(
                "/v1/admin/freezes/team:end", json={"by": "carol"}, headers=bearer(TOKENS["carol"])
            )
            assert ended.status_code == 200, ended.text
            [freeze] = (
                await http.get("/v1/admin/freezes?namespace=team", headers=bearer(TOKENS["bob"]))
            ).json()["freezes"]
            assert (freeze["by"], freeze["ended_by"]) == ("bob", "carol")
            put = await http.put(
                "/v1/admin/schemas/team/app",
                json={"schema": {"type": "object"}},
                headers=bearer(TOKENS["alice"]),
            )
            assert put.status_code == 200, put.text
            history = await http.get("/v1/admin/history/team/app", headers=bearer(TOKENS["bob"]))
            [row] = history.json()["entries"]
            assert (row["action"], row["actor"]) == ("schema.set", "alice")
    store.close()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("alice", "TEMPOCONF_ADMIN_TOKENS: entry 1 is not NAME:TOKEN"),
        ("alice:a,:b", "TEMPOCONF_ADMIN_TOKENS: entry 2 is not NAME:TOKEN"),
        ("alice:a,bob:", "TEMPOCONF_ADMIN_TOKENS: entry 2 is not NAME:TOKEN"),
        ("alice:a,alice:b", "TEMPOCONF_ADMIN_TOKENS: the name 'alice' is given twice"),
        ("alice:a,bob:a", "TEMPOCONF_ADMIN_TOKENS: entry 2 repeats the token of another name"),
    ],
)
def test_bad_named_tokens_are_refused_naming_the_variable(value: str, problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        Settings.from_env({"TEMPOCONF_ADMIN_TOKENS": value})
    assert str(refused.value).startswith(problem)


def test_named_tokens_are_read_and_kept_out_of_repr() -> None:
    settings = Settings.from_env({"TEMPOCONF_ADMIN_TOKENS": " alice:s3:cret , bob:t0ken "})
    assert settings.admin_tokens == (("alice", "s3:cret"), ("bob", "t0ken"))
    assert "s3:cret" not in repr(settings)
