"""The object decides the namespace (docs/contract.md, Access), over real HTTP against a real
Temporal server and worker, under a two-team policy.

Generated from the OpenAPI document, not listed by hand: every admin operation, with every
identifier it takes (the `namespace` query parameter, a `{namespace}` in its path, `workflow_id`,
a body's `namespace` and `changes`) pointed at team-b's rollout or namespace, sent by team-a's
admin (every role in team-a, none in team-b): each is refused, and each refusal is counted once
in `tempoconf_api_access_denied_total`. Every command and read of a changeset across team-a and
team-b, by a caller holding every role in one of its namespaces only: refused and counted."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE
from tests.api.helpers import make_stable
from tests.fixtures.access import write_policy
from tests.fixtures.services import live_api
from tests.fixtures.temporal import RolloutHarness
from tests.fixtures.waiting import eventually

TEAM_A, TEAM_B = "team-a", "team-b"
PATH = "app/config"
FRESH = "app/fresh"
"""A team-b config no rollout ever touched: its workflow id must stay free for team-b."""
ROLE_KEY = "x-tempoconf-role"
TOKENS = {
    "admin-a": ("admin-a-secret", [([TEAM_A], ["admin"])]),
    "admin-b": ("admin-b-secret", [([TEAM_B], ["admin"])]),
    "viewer-a": ("viewer-a-secret", [([TEAM_A], ["viewer"])]),
    "both": ("both-secret", [([TEAM_A, TEAM_B], ["admin"])]),
}
SCRAPER = ("prometheus", "scrape-secret")


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name][0]}"}


def manual_request(namespace: str, path: str, value: Any) -> dict[str, Any]:
    return {
        "path": path,
        "namespace": namespace,
        "value": value,
        "default_cooldown_time": "1s",
        "stages": [{"channel": "canary", "manual": True}],
        "author": "someone@example.com",
    }


@dataclass
class Attempt:
    """One admin operation with one identifier pointed at team-b."""

    template: str
    method: str
    url: str
    params: dict[str, str]
    body: Any
    identifier: str

    @property
    def name(self) -> str:
        return f"{self.method} {self.url} ({self.identifier})"

    async def send(self, http: httpx.AsyncClient, caller: str) -> httpx.Response:
        return await http.request(
            self.method.upper(),
            self.url,
            params=self.params,
            json=self.body,
            headers=bearer(caller),
        )


def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    ref = item.get("$ref")
    if ref is None:
        return item
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return dict(node)


def _body_fields(document: dict[str, Any], operation: dict[str, Any]) -> set[str]:
    body = operation.get("requestBody")
    if body is None:
        return set()
    schema = _resolve(document, body["content"]["application/json"]["schema"])
    return set(schema.get("properties", {}))


def _valid_body(operation_id: str) -> Any:
    """A body the operation takes for a team-a object (commands and ends take `{}`)."""
    return {
        "startRollout": manual_request(TEAM_A, PATH, {"limit": 3}),
        "planRollout": manual_request(TEAM_A, PATH, {"limit": 3}),
        "putSchema": {"schema": {"type": "object"}},
        "startFreeze": {"namespace": TEAM_A, "reason": "release"},
    }.get(operation_id, {})


def attempts(document: dict[str, Any], team_b_workflow: str) -> Iterator[Attempt]:
    """Every admin operation × every identifier it takes, that identifier pointed at team-b
    (the others at team-a)."""
    for template, item in document["paths"].items():
        for method, operation in item.items():
            if ROLE_KEY not in operation:
                continue
            parameters = [_resolve(document, p) for p in operation.get("parameters", [])]
            names = {(p["in"], p["name"]) for p in parameters}
            url = template.replace("{path}", PATH)
            params = {"namespace": TEAM_A} if ("query", "namespace") in names else {}
            body = _valid_body(operation["operationId"]) if method != "get" else None
            base = Attempt(template, method, url.replace("{namespace}", TEAM_A), params, body, "")
            if ("query", "namespace") in names:
                yield _with(base, "namespace", params={**params, "namespace": TEAM_B})
            if ("path", "namespace") in names:
                yield _with(base, "{namespace}", url=url.replace("{namespace}", TEAM_B))
            if ("query", "workflow_id") in names:
                yield _with(base, "workflow_id", params={**params, "workflow_id": team_b_workflow})
            fields = _body_fields(document, operation)
            if "namespace" in fields:
                yield _with(base, "body namespace", body={**body, "namespace": TEAM_B})
            if "changes" in fields:
                changes = [
                    {"path": PATH, "namespace": TEAM_A, "value": {"limit": 4}},
                    {"path": PATH, "namespace": TEAM_B, "value": {"limit": 4}},
                ]
                request = {k: v for k, v in body.items() if k not in ("path", "value")}
                yield _with(base, "body changes", body={**request, "changes": changes})
            if operation["operationId"] == "startRollout":
                # A start under team-b's id for a config no rollout touched yet.
                taken = f"rollout:{TEAM_B}/{FRESH}"
                yield _with(base, "workflow_id (free)", params={"workflow_id": taken})


def _with(base: Attempt, identifier: str, **changes: Any) -> Attempt:
    attempt = copy.deepcopy(base)
    attempt.identifier = identifier
    for name, value in changes.items():
        setattr(attempt, name, value)
    return attempt


async def denials(http: httpx.AsyncClient) -> float:
    """The sum of `tempoconf_api_access_denied_total` over every route and reason."""
    answer = await http.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER[1]}"})
    assert answer.status_code == 200, answer.text
    return sum(
        sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
        if sample.name == "tempoconf_api_access_denied_total"
    )


@pytest.fixture
def settings(rollout_harness: RolloutHarness, tmp_path: Path) -> Settings:
    policy = write_policy(tmp_path / "policy", tokens=TOKENS, scrapers=dict([SCRAPER]))
    return Settings(
        data_dir=tmp_path,
        temporal_address=rollout_harness.env.client.service_client.config.target_host,
        task_queue=rollout_harness.task_queue,
        access_file=policy,
    )


async def _awaiting_approval(http: httpx.AsyncClient, namespace: str, path: str) -> dict[str, Any]:
    async def state() -> dict[str, Any] | None:
        answer = await http.get(
            f"/v1/admin/rollouts/{path}", params={"namespace": namespace}, headers=bearer("both")
        )
        status = (answer.json().get("workflow") or {}).get("status") or {}
        return answer.json() if status.get("state") == "awaiting_approval" else None

    found: dict[str, Any] = await eventually(
        state, what=f"{namespace}/{path} awaiting its approval"
    )
    return found


async def test_every_identifier_pointed_at_another_namespace_is_refused_and_counted(
    rollout_harness: RolloutHarness, settings: Settings
) -> None:
    store: Store = rollout_harness.store
    for namespace in (TEAM_A, TEAM_B):
        make_stable(store, PATH, {"limit": 1}, namespace=namespace)
    async with live_api(store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            started = await http.post(
                "/v1/admin/rollouts",
                json=manual_request(TEAM_B, PATH, {"limit": 2}),
                headers=bearer("admin-b"),
            )
            assert started.status_code == 202, started.text
            team_b_workflow = started.json()["workflow_id"]
            before = await _awaiting_approval(http, TEAM_B, PATH)
            document = (await http.get("/openapi.json")).json()
            tried: set[str] = set()
            for attempt in attempts(document, team_b_workflow):
                counted = await denials(http)
                refused = await attempt.send(http, "admin-a")
                assert refused.status_code in (400, 403, 404), (attempt.name, refused.text)
                assert await denials(http) == counted + 1, (attempt.name, refused.text)
                documented = document["paths"][attempt.template][attempt.method]["responses"]
                assert str(refused.status_code) in documented, (attempt.name, refused.text)
                if attempt.identifier == "workflow_id" and refused.status_code == 404:
                    # Told exactly as an id that names no workflow at all: nothing leaks.
                    nothing = f"rollout:{TEAM_B}/no/such"
                    other = await _with(
                        attempt, "", params={**attempt.params, "workflow_id": nothing}
                    ).send(http, "admin-a")
                    assert other.status_code == refused.status_code
                    assert other.json()["error"].replace(nothing, "ID") == refused.json()[
                        "error"
                    ].replace(team_b_workflow, "ID")
                tried.add(f"{attempt.method} {attempt.template} {attempt.identifier}")
            # Every command, the read, the start: with workflow_id; freezes by namespace.
            assert sum("workflow_id" in name for name in tried) >= 9, sorted(tried)
            assert any("body changes" in name for name in tried)
            assert any("{namespace}" in name for name in tried)
            # team-b's rollout saw nothing of it: still awaiting, no note, no approval.
            after = await _awaiting_approval(http, TEAM_B, PATH)
            assert after["workflow"]["run_id"] == before["workflow"]["run_id"]
            progress = after["workflow"]["status"]
            assert progress["approvals"] == []
            assert len(progress["history"]) == len(before["workflow"]["status"]["history"])
            # team-b's own start of the config whose id team-a asked for still takes it.
            make_stable(store, FRESH, {"limit": 1}, namespace=TEAM_B)
            own = await http.post(
                "/v1/admin/rollouts",
                json=manual_request(TEAM_B, FRESH, {"limit": 2}),
                headers=bearer("admin-b"),
            )
            assert own.status_code == 202, own.text
            assert own.json()["workflow_id"] == f"rollout:{TEAM_B}/{FRESH}"
            for namespace, path in ((TEAM_B, PATH), (TEAM_B, FRESH)):
                halted = await http.post(
                    f"/v1/admin/rollouts/{path}:halt",
                    params={"namespace": namespace},
                    json={"reason": "done"},
                    headers=bearer("admin-b"),
                )
                assert halted.status_code == 200, halted.text


async def test_a_changeset_across_namespaces_is_steered_and_read_only_with_every_role(
    rollout_harness: RolloutHarness, settings: Settings
) -> None:
    store: Store = rollout_harness.store
    for namespace in (TEAM_A, TEAM_B):
        make_stable(store, PATH, {"limit": 1}, namespace=namespace)
    changeset = {
        **manual_request(TEAM_A, PATH, None),
        "changes": [
            {"path": PATH, "namespace": TEAM_A, "value": {"limit": 5}},
            {"path": PATH, "namespace": TEAM_B, "value": {"limit": 5}},
        ],
    }
    del changeset["path"], changeset["value"]
    async with live_api(store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            started = await http.post("/v1/admin/rollouts", json=changeset, headers=bearer("both"))
            assert started.status_code == 202, started.text
            workflow_id = started.json()["workflow_id"]
            assert workflow_id.startswith("changeset:")
            before = await _awaiting_approval(http, TEAM_A, PATH)
            document = (await http.get("/openapi.json")).json()
            commands = [
                template
                for template, item in document["paths"].items()
                if template.startswith("/v1/admin/rollouts/{path}:")
            ]
            assert len(commands) >= 6
            for caller, mine, other in (("admin-a", TEAM_A, TEAM_B), ("admin-b", TEAM_B, TEAM_A)):
                for template in [*commands, "/v1/admin/rollouts/{path}"]:
                    method = "GET" if template.endswith("{path}") else "POST"
                    for params in (
                        {"namespace": mine},
                        {"namespace": mine, "workflow_id": workflow_id},
                    ):
                        counted = await denials(http)
                        refused = await http.request(
                            method,
                            template.replace("{path}", PATH),
                            params=params,
                            json={} if method == "POST" else None,
                            headers=bearer(caller),
                        )
                        assert refused.status_code == 403, (caller, template, refused.text)
                        assert f"role in namespace {other!r}" in refused.json()["error"]
                        assert await denials(http) == counted + 1, (caller, template)
            # Nothing reached the changeset: it waits as it did, on both configs.
            after = await _awaiting_approval(http, TEAM_B, PATH)
            assert after["workflow"]["workflow_id"] == workflow_id
            assert after["workflow"]["status"]["approvals"] == []
            assert len(after["workflow"]["status"]["history"]) == len(
                before["workflow"]["status"]["history"]
            )
            # A viewer of team-a reads team-a's history, and only team-a's config in it.
            history = await http.get(
                f"/v1/admin/history/{PATH}",
                params={"namespace": TEAM_A},
                headers=bearer("viewer-a"),
            )
            assert history.status_code == 200, history.text
            started_row = next(
                entry for entry in history.json()["entries"] if entry["action"] == "rollout.started"
            )
            assert started_row["details"]["changeset"] == [f"{TEAM_A}/{PATH}"]
            assert started_row["details"]["changeset_hidden"] == 1
            assert TEAM_B not in json.dumps(started_row)
            # Whoever holds the role in both steers it.
            halted = await http.post(
                f"/v1/admin/rollouts/{PATH}:halt",
                params={"namespace": TEAM_B},
                json={"reason": "done"},
                headers=bearer("both"),
            )
            assert halted.status_code == 200, halted.text
            assert halted.json()["workflow_id"] == workflow_id


async def test_a_start_takes_only_an_id_its_own_configs_determine(
    rollout_harness: RolloutHarness, settings: Settings
) -> None:
    store: Store = rollout_harness.store
    make_stable(store, PATH, {"limit": 1}, namespace=TEAM_A)
    async with live_api(store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            request = manual_request(TEAM_A, PATH, {"limit": 2})
            for refused_id in (f"rollout:{TEAM_A}/{PATH}x", f"rollout:{TEAM_A}/{PATH}:a b", "x"):
                refused = await http.post(
                    "/v1/admin/rollouts",
                    params={"workflow_id": refused_id},
                    json=request,
                    headers=bearer("admin-a"),
                )
                assert refused.status_code == 400, refused.text
                assert f"rollout:{TEAM_A}/{PATH}" in refused.json()["error"]
            suffixed = f"rollout:{TEAM_A}/{PATH}:hotfix-7"
            started = await http.post(
                "/v1/admin/rollouts",
                params={"workflow_id": suffixed},
                json=request,
                headers=bearer("admin-a"),
            )
            assert started.status_code == 202, started.text
            assert started.json()["workflow_id"] == suffixed
            # Its own id reads and steers it, before and after it took its lock.
            read = await http.get(
                f"/v1/admin/rollouts/{PATH}",
                params={"namespace": TEAM_A, "workflow_id": suffixed},
                headers=bearer("viewer-a"),
            )
            assert read.status_code == 200, read.text
            assert read.json()["workflow"]["workflow_id"] == suffixed
            await _awaiting_approval(http, TEAM_A, PATH)
            halted = await http.post(
                f"/v1/admin/rollouts/{PATH}:halt",
                params={"namespace": TEAM_A, "workflow_id": suffixed},
                json={"reason": "done"},
                headers=bearer("admin-a"),
            )
            assert halted.status_code == 200, halted.text


async def test_only_an_admin_everywhere_it_touches_overrides_a_freeze(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> None:
    """`override_freeze` passes freezes an admin started: it takes the admin role in every
    namespace the request touches, checked as the request is made; its audit rows name who
    started it. A rollback keeps its own rule (it passes freezes, from an operator)."""
    tokens = {
        **TOKENS,
        "operator-a": ("operator-a-secret", [([TEAM_A], ["operator"])]),
        "admin-a-operator-b": (
            "admin-a-operator-b-secret",
            [([TEAM_A], ["admin"]), ([TEAM_B], ["operator"])],
        ),
    }
    policy = write_policy(tmp_path / "policy", tokens=tokens, scrapers=dict([SCRAPER]))
    settings = Settings(
        data_dir=tmp_path,
        temporal_address=rollout_harness.env.client.service_client.config.target_host,
        task_queue=rollout_harness.task_queue,
        access_file=policy,
    )
    store: Store = rollout_harness.store
    stable = make_stable(store, PATH, {"limit": 1}, namespace=TEAM_A)
    make_stable(store, PATH, {"limit": 1}, namespace=TEAM_B)

    def as_(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[name][0]}"}

    override = {
        "path": PATH,
        "namespace": TEAM_A,
        "value": {"limit": 9},
        "author": "someone@example.com",
        "override_freeze": {"reason": "the fix for incident 4711"},
    }
    async with live_api(store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            frozen = await http.post(
                "/v1/admin/freezes",
                json={"namespace": TEAM_A, "reason": "incident 4711"},
                headers=as_("admin-a"),
            )
            assert frozen.status_code == 201, frozen.text
            for route in ("/v1/admin/plans", "/v1/admin/rollouts"):
                counted = await denials(http)
                refused = await http.post(route, json=override, headers=as_("operator-a"))
                assert refused.status_code == 403, refused.text
                assert "'operator-a' needs the admin role in namespace 'team-a'" in refused.text
                assert await denials(http) == counted + 1
            across = {
                **{k: v for k, v in override.items() if k not in ("path", "value")},
                "changes": [
                    {"path": PATH, "namespace": TEAM_A, "value": {"limit": 9}},
                    {"path": PATH, "namespace": TEAM_B, "value": {"limit": 9}},
                ],
            }
            refused = await http.post(
                "/v1/admin/rollouts", json=across, headers=as_("admin-a-operator-b")
            )
            assert refused.status_code == 403, refused.text
            assert "needs the admin role in namespace 'team-b'" in refused.text
            # A rollback from an operator still passes the freeze: the way back stays open.
            rollback = {"path": PATH, "namespace": TEAM_A, "version": stable.version}
            back = await http.post("/v1/admin/rollouts", json=rollback, headers=as_("operator-a"))
            assert back.status_code == 202, back.text
            await _ended(http, "rollout.promoted")
            started = await http.post("/v1/admin/rollouts", json=override, headers=as_("admin-a"))
            assert started.status_code == 202, started.text
            await _ended(http, "rollout.promoted", count=2)
            history = await http.get(
                f"/v1/admin/history/{PATH}", params={"namespace": TEAM_A}, headers=as_("admin-a")
            )
            passes = [
                entry
                for entry in history.json()["entries"]
                if entry["action"] == "rollout.freeze_overridden"
            ]
            assert [entry["actor"] for entry in passes] == ["operator-a", "admin-a"], passes
            assert passes[1]["reason"] == "the fix for incident 4711"


async def _ended(http: httpx.AsyncClient, action: str, *, count: int = 1) -> None:
    async def ended() -> bool:
        history = await http.get(
            f"/v1/admin/history/{PATH}", params={"namespace": TEAM_A}, headers=bearer("admin-a")
        )
        actions = [entry["action"] for entry in history.json()["entries"]]
        assert "rollout.reverted" not in actions and "rollout.failed" not in actions, actions
        if actions.count(action) < count:
            return False
        # Its workflow closed too (the next start takes the same id).
        state = await http.get(
            f"/v1/admin/rollouts/{PATH}", params={"namespace": TEAM_A}, headers=bearer("admin-a")
        )
        return state.json()["workflow"].get("execution_status") == "COMPLETED"

    await eventually(ended, what=f"{count} {action} of {TEAM_A}/{PATH}")


async def test_a_default_id_taken_by_another_teams_rollout_does_not_reach_it(
    rollout_harness: RolloutHarness, settings: Settings
) -> None:
    """The Temporal CLI takes any id for any request: team-b's rollout started under team-a's
    config's default id is not steered or read through team-a's config (its own request decides
    its namespaces, before it wrote anything to the store and after)."""
    store: Store = rollout_harness.store
    make_stable(store, PATH, {"limit": 1}, namespace=TEAM_B)
    squatted = f"rollout:{TEAM_A}/{PATH}"
    handle = await rollout_harness.realtime_client.start_workflow(
        WORKFLOW_TYPE,
        manual_request(TEAM_B, PATH, {"limit": 2}),
        id=squatted,
        task_queue=rollout_harness.task_queue,
    )
    async with live_api(store, settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            before = await _awaiting_approval(http, TEAM_B, PATH)
            assert before["workflow"]["workflow_id"] == squatted
            for method, route in (
                ("POST", f"/v1/admin/rollouts/{PATH}:halt"),
                ("POST", f"/v1/admin/rollouts/{PATH}:approve"),
                ("GET", f"/v1/admin/rollouts/{PATH}"),
            ):
                counted = await denials(http)
                refused = await http.request(
                    method,
                    route,
                    params={"namespace": TEAM_A},
                    json={} if method == "POST" else None,
                    headers=bearer("admin-a"),
                )
                assert refused.status_code == 404, (route, refused.text)
                assert await denials(http) == counted + 1
            after = await _awaiting_approval(http, TEAM_B, PATH)
            assert len(after["workflow"]["status"]["history"]) == len(
                before["workflow"]["status"]["history"]
            )
    await handle.terminate(reason="end of test")
