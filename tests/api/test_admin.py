"""Admin endpoints: schemas, versions, history, and rollouts started, watched and signalled
through a real Temporal server with a real worker (rollout_harness)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.service import RPCError, RPCStatusCode

from tempoconf.api.app import create_app
from tempoconf.canonical import version_id
from tempoconf.operations.errors import Unavailable
from tempoconf.operations.temporal_access import temporal_calls
from tempoconf.rollout.progress import CommandResult
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.api.helpers import make_stable
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.fixtures.waiting import eventually

STABLE_VALUE = {"max_connections": 1000}
NEW_VALUE = {"max_connections": 2000}
SCHEMA = {
    "type": "object",
    "properties": {"max_connections": {"type": "integer", "minimum": 1}},
    "required": ["max_connections"],
}


def unique_path() -> str:
    return f"admin/config-{uuid.uuid4().hex[:8]}"


@pytest_asyncio.fixture
async def admin(
    rollout_harness: RolloutHarness, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """The API over the harness's store, starting workflows on the harness's task queue."""
    settings = Settings(data_dir=tmp_path, task_queue=rollout_harness.task_queue)
    app = create_app(
        rollout_harness.store,
        settings,
        poll_interval=0.05,
        temporal_client=rollout_harness.realtime_client,
    )
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test", timeout=30
        ) as http:
            yield http


def rollout_request(path: str, **overrides: Any) -> dict[str, Any]:
    return {
        "path": path,
        "value": NEW_VALUE,
        "default_cooldown_time": "1h",
        "stages": [{"channel": "canary"}, {"percentile": 50, "manual": True}],
        "author": "alice@example.com",
        "commit": "3f2a9c1",
        "message": "raise max_connections",
        **overrides,
    }


async def state_of(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    response = await http.get(f"/v1/admin/rollouts/{path}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def wait_for_state(http: httpx.AsyncClient, path: str, state: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any]:
        body = await state_of(http, path)
        status = body["workflow"]["status"]
        assert status is not None and status["state"] == state, status and status["state"]
        return body

    return await eventually(
        reached, what=f"the rollout of {path} to be {state}", timeout=20, interval=0.1
    )


# -- schemas, versions, history -----------------------------------------------------------------


async def test_schema_set_get_and_refused(
    rollout_harness: RolloutHarness, admin: httpx.AsyncClient
) -> None:
    path = unique_path()
    url = f"/v1/admin/schemas/{path}"

    missing = await admin.get(url)
    stored = await admin.put(url, json={"schema": SCHEMA, "by": "alice", "reason": "first"})
    fetched = await admin.get(url)
    broken = await admin.put(url, json={"schema": {"type": "nope", "minimum": "x"}})
    not_a_schema = await admin.put(url, json={"schema": 3})
    extra = await admin.put(url, json={"schema": SCHEMA, "why": "typo"})
    no_schema = await admin.put(url, json={"reason": "x"})

    assert missing.status_code == 404
    assert stored.status_code == 200 and stored.json()["schema"] == SCHEMA
    assert fetched.json() == {"namespace": "default", "path": path, "schema": SCHEMA}
    assert broken.status_code == 400
    pointers = {problem["pointer"] for problem in broken.json()["problems"]}
    assert {"/schema/type", "/schema/minimum"} <= pointers
    assert not_a_schema.status_code == 400 and "object or a boolean" in not_a_schema.text
    assert extra.status_code == 400 and "/why" in extra.json()["error"]
    assert no_schema.status_code == 400 and "/schema" in no_schema.json()["error"]
    assert rollout_harness.store.get_schema("default", path) == SCHEMA  # refusals changed nothing
    history = rollout_harness.store.history("default", path)
    assert [(e.action, e.actor, e.reason) for e in history] == [("schema.set", "alice", "first")]


async def test_versions_and_history(
    rollout_harness: RolloutHarness, admin: httpx.AsyncClient
) -> None:
    path = unique_path()
    first = make_stable(rollout_harness.store, path, STABLE_VALUE)
    second = make_stable(rollout_harness.store, path, NEW_VALUE)

    versions = await admin.get(f"/v1/admin/versions/{path}")
    history = await admin.get(f"/v1/admin/history/{path}")
    last = await admin.get(f"/v1/admin/history/{path}", params={"limit": "1"})
    unknown = await admin.get("/v1/admin/versions/no/such-config")
    other_namespace = await admin.get(f"/v1/admin/history/{path}", params={"namespace": "team"})

    assert versions.status_code == 200
    body = versions.json()
    assert body["stable"] == second.version
    assert {v["version"]: v["is_stable"] for v in body["versions"]} == {
        first.version: False,
        second.version: True,
    }
    assert all(len(v["stable_since"]) == 1 for v in body["versions"])
    assert [e["action"] for e in history.json()["entries"]] == ["stable.set", "stable.set"]
    assert history.json()["entries"][1]["version"] == second.version
    assert len(last.json()["entries"]) == 1
    assert unknown.status_code == 404
    assert other_namespace.json()["entries"] == []


# -- rollouts -----------------------------------------------------------------------------------


async def test_start_watch_and_signal_a_rollout(
    rollout_harness: RolloutHarness, admin: httpx.AsyncClient
) -> None:
    path = unique_path()
    stable = make_stable(rollout_harness.store, path, STABLE_VALUE)

    started = await admin.post("/v1/admin/rollouts", json=rollout_request(path))

    assert started.status_code == 202, started.text
    body = started.json()
    assert body["workflow_id"] == f"rollout:default/{path}"
    assert body["version"] == version_id(NEW_VALUE)
    assert body["stages"] == ["channel:canary", "50%"]
    state = await wait_for_state(admin, path, "holding")
    assert state["rollout"]["version"] == body["version"]
    assert state["lock"]["workflow_id"] == body["workflow_id"]
    assert state["workflow"]["execution_status"] == "RUNNING"
    assert state["workflow"]["run_id"] == body["run_id"]

    # The canary stage reaches clients through the API.
    async def canary_served() -> bool:
        response = await admin.get(f"/v1/configs/{path}", params={"channel": "canary"})
        return response.status_code == 200 and response.json()["version"] == body["version"]

    await eventually(canary_served, what="the API to serve the canary stage")

    paused = await admin.post(
        f"/v1/admin/rollouts/{path}:pause", json={"reason": "lunch", "by": "bob"}
    )
    assert paused.status_code == 200, paused.text
    # A short result (the full progress is GET /v1/admin/rollouts/{path}).
    assert set(paused.json()) == {"workflow_id", *(field.name for field in fields(CommandResult))}
    assert paused.json() | {"phase": None} == {
        "workflow_id": body["workflow_id"], "command": "pause", "accepted": True, "state": "holding",
        "phase": None, "stage": "channel:canary", "stage_number": 1, "stage_count": 2, "paused": True,
        "message": "paused at stage 1/2 channel:canary: the rollout does not leave it until resume",
    }  # fmt: skip
    assert paused.json()["phase"] == "Paused at channel:canary: lunch"
    resumed = await admin.post(f"/v1/admin/rollouts/{path}:resume")  # no body: fine
    assert resumed.status_code == 200 and resumed.json()["paused"] is False

    refused = await admin.post(f"/v1/admin/rollouts/{path}:approve", json={})
    assert refused.status_code == 409
    assert "cannot approve: nothing is waiting for approval" in refused.json()["error"]

    again = await admin.post(
        "/v1/admin/rollouts", json=rollout_request(path, value={"max_connections": 3})
    )
    assert again.status_code == 409
    assert "already has a running rollout" in again.json()["error"]

    advanced = await admin.post(f"/v1/admin/rollouts/{path}:advance", json={"reason": "looks fine"})
    assert advanced.status_code == 200
    # Answered once it took effect: the 50% stage is published and held.
    assert (advanced.json()["state"], advanced.json()["stage"], advanced.json()["stage_number"]) == (
        "holding", "50%", 2,
    )  # fmt: skip
    assert advanced.json()["message"] == "the hold of stage 1/2 channel:canary ended early"

    halted = await admin.post(f"/v1/admin/rollouts/{path}:halt", json={"reason": "bad numbers"})
    assert halted.status_code == 200, halted.text
    assert halted.json()["state"] == "halted"
    assert halted.json()["phase"] == f"Halted, back to stable {stable.version}: bad numbers"
    handle = rollout_harness.realtime_client.get_workflow_handle(body["workflow_id"])
    result = await rollout_result(handle)
    assert result["outcome"] == "halted"
    assert rollout_harness.store.get_stable("default", path).version == stable.version

    after = await admin.post(f"/v1/admin/rollouts/{path}:bypass", json={"reason": "too late"})
    assert after.status_code in (404, 409)
    final = await state_of(admin, path)
    assert final["rollout"] is None and final["lock"] is None
    assert final["workflow"]["status"]["state"] == "halted"


async def test_bypass_promotes_now(
    rollout_harness: RolloutHarness, admin: httpx.AsyncClient
) -> None:
    path = unique_path()
    make_stable(rollout_harness.store, path, STABLE_VALUE)
    started = await admin.post("/v1/admin/rollouts", json=rollout_request(path))
    assert started.status_code == 202
    await wait_for_state(admin, path, "holding")

    handle = rollout_harness.realtime_client.get_workflow_handle(started.json()["workflow_id"])
    # The Web UI's summary of the workflow names the change, not only the version.
    summary = await (await handle.describe()).static_summary()
    assert summary == f"default/{path}: max_connections 1000 → 2000 ({version_id(NEW_VALUE)})"

    bypassed = await admin.post(f"/v1/admin/rollouts/{path}:bypass", json={"reason": "hotfix"})

    assert bypassed.status_code == 200, bypassed.text
    assert (await rollout_result(handle))["outcome"] == "bypassed"
    assert rollout_harness.store.get_stable("default", path).version == version_id(NEW_VALUE)


async def test_a_rollback_through_strategy_stages_reports_its_version_and_stages(
    rollout_harness: RolloutHarness, admin: httpx.AsyncClient
) -> None:
    path = unique_path()
    first = make_stable(rollout_harness.store, path, STABLE_VALUE)
    request = {
        "path": path,
        "version": first.version,
        "stages": [{"channel": "canary"}],
        "strategy": {"linear": {"step": 50, "every": "1h"}},
    }

    started = await admin.post("/v1/admin/rollouts", json=request)

    assert started.status_code == 202, started.text
    assert started.json()["version"] == first.version
    assert started.json()["stages"] == ["channel:canary", "50%", "100%"]
    bypassed = await admin.post(f"/v1/admin/rollouts/{path}:bypass", json={"reason": "done"})
    assert bypassed.status_code == 200, bypassed.text


async def test_invalid_rollout_requests_list_every_problem_and_start_nothing(
    rollout_harness: RolloutHarness, admin: httpx.AsyncClient
) -> None:
    path = unique_path()
    rollout_harness.store.set_schema("default", path, SCHEMA, actor="tests")
    request = rollout_request(
        path, value={"max_connections": 0}, stages=[{"percentile": 150}, {"cooldwon": "1m"}]
    )

    response = await admin.post("/v1/admin/rollouts", json=request)

    assert response.status_code == 400
    pointers = {problem["pointer"] for problem in response.json()["problems"]}
    assert {"/value/max_connections", "/stages/0/percentile", "/stages/1/cooldwon"} <= pointers
    state = await state_of(admin, path)
    assert state["lock"] is None and state["rollout"] is None
    assert "no workflow" in state["workflow"]["error"]


async def test_signals_without_a_rollout_are_404(admin: httpx.AsyncClient) -> None:
    response = await admin.post(f"/v1/admin/rollouts/{unique_path()}:halt", json={"reason": "x"})

    assert response.status_code == 404
    assert "no running rollout" in response.json()["error"]


@asynccontextmanager
async def api_without_temporal(
    store: Store, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, int]]:
    """The app over `store`, its Temporal address a port nothing listens on; yields a client
    of it and that port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    settings = Settings(data_dir=tmp_path, temporal_address=f"127.0.0.1:{port}")
    app = create_app(store, settings, poll_interval=0.05)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://tempoconf.test", timeout=30
        ) as http:
            yield http, port


async def test_temporal_unreachable_is_503_while_the_rest_works(
    api_store: Store, tmp_path: Path
) -> None:
    path = unique_path()
    make_stable(api_store, path, STABLE_VALUE)
    async with api_without_temporal(api_store, tmp_path) as (http, port):
        start = await http.post("/v1/admin/rollouts", json=rollout_request(path))
        signal = await http.post(f"/v1/admin/rollouts/{path}:halt")
        state = await http.get(f"/v1/admin/rollouts/{path}")
        versions = await http.get(f"/v1/admin/versions/{path}")

    assert start.status_code == 503 and f"127.0.0.1:{port}" in start.json()["error"]
    assert "unreachable" in start.json()["error"]
    assert signal.status_code == 503
    assert start.headers["retry-after"] == signal.headers["retry-after"] == "5"
    assert state.status_code == 200 and "unreachable" in state.json()["workflow"]["error"]
    assert versions.status_code == 200


def test_a_connection_lost_under_a_call_is_temporal_not_answering() -> None:
    # The SDK's error when the link broke mid-call (issue 31's cut link: the API answered 500).
    with pytest.raises(Unavailable, match="Temporal at x did not answer: transport error"):
        with temporal_calls("Temporal at x"):
            raise RPCError("transport error", RPCStatusCode.UNKNOWN, b"")
    # An UNKNOWN that Temporal answered stays the caller's.
    with pytest.raises(RPCError):
        with temporal_calls("Temporal at x"):
            raise RPCError("something Temporal said", RPCStatusCode.UNKNOWN, b"")


async def test_a_freeze_ends_when_temporal_is_unreachable_and_the_answer_says_nobody_was_told(
    api_store: Store, tmp_path: Path
) -> None:
    api_store.start_freeze("frozen-ns", reason="release freeze", by="rm")
    async with api_without_temporal(api_store, tmp_path) as (http, port):
        ended = await http.post("/v1/admin/freezes/frozen-ns:end", json={"by": "oncall"})

    assert ended.status_code == 200, ended.text
    answer = ended.json()
    assert answer["active"] is False and answer["ended_by"] == "oncall"
    assert answer["rollouts_told"] is None
    assert f"127.0.0.1:{port}" in answer["not_told"] and "unreachable" in answer["not_told"]
    assert api_store.active_freeze("frozen-ns") is None


async def test_a_config_named_like_a_command_is_a_config_and_its_commands_take_a_colon(
    rollout_harness: RolloutHarness, admin: httpx.AsyncClient
) -> None:
    # Config paths whose last segment is a command's name (issue 12, hole 5).
    prefix = unique_path()
    halt_named, advance_named = f"{prefix}/halt", f"{prefix}/advance"
    for path in (halt_named, advance_named):
        make_stable(rollout_harness.store, path, STABLE_VALUE)
        started = await admin.post("/v1/admin/rollouts", json=rollout_request(path))
        assert started.status_code == 202, started.text
        # GET is that config's rollout, never a command on its parent.
        state = await wait_for_state(admin, path, "holding")
        assert state["path"] == path
        assert state["workflow"]["workflow_id"] == f"rollout:default/{path}"

    advanced = await admin.post(f"/v1/admin/rollouts/{advance_named}:advance")
    assert advanced.status_code == 200, advanced.text
    assert advanced.json()["workflow_id"] == f"rollout:default/{advance_named}"
    assert advanced.json()["stage"] == "50%"
    assert "Deprecation" not in advanced.headers

    halted = await admin.post(f"/v1/admin/rollouts/{halt_named}:halt", json={"reason": "named so"})
    assert halted.status_code == 200, halted.text
    assert halted.json()["workflow_id"] == f"rollout:default/{halt_named}"
    assert halted.json()["state"] == "halted"
    # The other config was not touched by it.
    assert (await state_of(admin, advance_named))["workflow"]["status"]["state"] == "holding"

    # A command's route is POST only: a GET is told so, not taken for a path with a ':'.
    wrong_method = await admin.get(f"/v1/admin/rollouts/{advance_named}:halt")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"

    # The `/{path}/{command}` form is gone: that POST is on the config's own route, GET only.
    removed = await admin.post(f"/v1/admin/rollouts/{advance_named}/halt", json={"reason": "old"})
    assert removed.status_code == 405
    assert set(removed.headers["allow"].split(", ")) == {"GET", "HEAD"}
