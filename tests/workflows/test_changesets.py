"""Atomic changesets (issue 13) on a live stack: a real Temporal server, the real worker, SQLite
and PostgreSQL, and the real API over HTTP.

A changeset's configs share one stage ladder, one cohort per stage (bucketed by the changeset's
key), one lock set taken all or none, and one revert; the multi-path GET answers every config from
one snapshot."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tempoconf.canonical import version_id
from tempoconf.cli.worker import ensure_search_attributes
from tempoconf.resolution.bucketing import bucket
from tempoconf.rollout.changesets import changeset_key, changeset_workflow_id
from tempoconf.rollout.digest import plan_digest
from tempoconf.rollout.plan import plan_from_request
from tempoconf.rollout.validation import validate_rollout
from tempoconf.store.store import Store
from tempoconf.temporal.binaries import temporal_cli_path
from tempoconf.temporal.names import (
    PATHS_ATTRIBUTE_NAME,
    SEARCH_ATTRIBUTES,
    WORKFLOW_TYPE,
    registered_search_attributes,
)
from tests.fixtures.services import live_api
from tests.fixtures.temporal import (
    RolloutHarness,
    rollout_result,
    running_harness,
    sqlite_harness,
)
from tests.fixtures.waiting import eventually
from tests.store.helpers import snapshot_of
from tests.workflows.test_rollout import NAMESPACE, status, unique_path, wait_for_state

SCHEMA = {
    "type": "object",
    "properties": {"max_connections": {"type": "integer", "minimum": 1}},
    "required": ["max_connections"],
}
OLD = [{"max_connections": 100}, {"max_connections": 200}]
NEW = [{"max_connections": 111}, {"max_connections": 222}]


@pytest_asyncio.fixture
async def harness(
    temporal_env: WorkflowEnvironment, realtime_client: Any, store: Store
) -> AsyncIterator[RolloutHarness]:
    """The rollout worker over the `store` fixture: every test runs on SQLite and PostgreSQL."""
    async with running_harness(temporal_env, realtime_client, store) as running:
        yield running


async def stable_pair(harness: RolloutHarness) -> list[str]:
    """Two configs with a schema and a stable value each."""
    paths = [unique_path(), unique_path()]
    for path, value in zip(paths, OLD, strict=True):
        harness.store.set_schema(NAMESPACE, path, SCHEMA, actor="test")
        handle = await harness.start({"path": path, "namespace": NAMESPACE, "value": value})
        assert (await rollout_result(handle))["outcome"] == "promoted"
    return paths


def changeset(paths: list[str], values: list[Any], **overrides: Any) -> dict[str, Any]:
    return {
        "namespace": NAMESPACE,
        "changes": [
            {"path": path, "value": value} for path, value in zip(paths, values, strict=True)
        ],
        "stages": [{"percentile": 50, "cooldown": "1h"}],
        "default_expiration_time": "1h",
        "author": "alice",
        **overrides,
    }


async def start_held(harness: RolloutHarness, paths: list[str]) -> WorkflowHandle[Any, Any]:
    """A changeset of NEW at 50 %, holding (on the real clock, so it stays there)."""
    handle = await harness.start(
        changeset(paths, NEW),
        real_clock=True,
        workflow_id=changeset_workflow_id((NAMESPACE, path) for path in paths),
    )
    await wait_for_state(handle, "holding", stage_index=0)
    return handle


async def multi_get(api: httpx.AsyncClient, paths: list[str], client_id: str) -> list[Any]:
    answer = await api.get(
        "/v1/configs",
        params=[("path", path) for path in paths]
        + [("namespace", NAMESPACE), ("client", client_id)],
    )
    assert answer.status_code == 200, answer.text
    return [config["value"] for config in answer.json()["configs"]]


async def test_a_changeset_at_50_percent_gives_each_client_all_new_values_or_none(
    harness: RolloutHarness,
) -> None:
    paths = await stable_pair(harness)
    handle = await start_held(harness, paths)
    key = changeset_key((NAMESPACE, path) for path in paths)
    async with live_api(harness.store) as url, httpx.AsyncClient(base_url=url) as api:

        async def gets_all_or_none(number: int) -> bool:
            client_id = f"host-{number:04d}"
            together = await multi_get(api, paths, client_id)
            assert together in (OLD, NEW), (client_id, together)
            # The single-config route agrees with the multi-path one, config by config.
            alone = [
                (
                    await api.get(
                        f"/v1/configs/{path}", params={"namespace": NAMESPACE, "client": client_id}
                    )
                ).json()["value"]
                for path in paths
            ]
            assert alone == together, client_id
            # The documented formula: bucket(changeset key, client id) < 5000.
            assert (together == NEW) == (bucket(key, client_id) < 5000), client_id
            return together == NEW

        # A hundred clients at a time: each request on its own waits on the network, not the API.
        new = 0
        for first in range(0, 1000, 100):
            answers = await asyncio.gather(
                *(gets_all_or_none(n) for n in range(first, first + 100))
            )
            new += sum(answers)
        assert 430 <= new <= 570, new
    await handle.signal("halt", {"reason": "test over"})
    assert (await rollout_result(handle))["outcome"] == "halted"


async def test_halt_reverts_every_config_and_each_history_ends_with_it(
    harness: RolloutHarness,
) -> None:
    paths = await stable_pair(harness)
    handle = await start_held(harness, paths)
    for path in paths:
        snapshot = snapshot_of(harness.store, NAMESPACE, path)
        assert snapshot is not None and snapshot.staged is not None and snapshot.stages
        lock = harness.store.get_lock(NAMESPACE, path)
        assert lock is not None and lock.workflow_id == handle.id
    progress = await status(handle)
    assert progress["path"] == paths[0]

    await handle.signal("halt", {"reason": "bad pair"})
    result = await rollout_result(handle)
    assert result["outcome"] == "halted"
    for path, old in zip(paths, OLD, strict=True):
        snapshot = snapshot_of(harness.store, NAMESPACE, path)
        assert snapshot is not None and snapshot.staged is None and snapshot.stages == ()
        assert snapshot.stable is not None and snapshot.stable.value == old
        assert harness.store.get_lock(NAMESPACE, path) is None
        actions = [
            entry.action
            for entry in harness.store.history(NAMESPACE, path)
            if entry.workflow_id == handle.id
        ]
        assert actions[0] == "rollout.started" and actions[-1] == "rollout.halted", actions
        assert "stage.published" in actions and "rollout.reverting" in actions, actions


async def test_a_promoted_changeset_makes_every_config_stable(harness: RolloutHarness) -> None:
    paths = await stable_pair(harness)
    handle = await harness.start(changeset(paths, NEW, stages=[{"percentile": 50}]))
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    for path, new in zip(paths, NEW, strict=True):
        stable = harness.store.get_stable(NAMESPACE, path)
        assert stable is not None and stable.value == new
        assert stable.version == version_id(new)
        assert harness.store.get_lock(NAMESPACE, path) is None
        actions = [
            entry.action
            for entry in harness.store.history(NAMESPACE, path)
            if entry.workflow_id == handle.id
        ]
        assert actions[-1] == "rollout.promoted", actions


async def test_a_change_failing_its_schema_refuses_the_changeset_storing_nothing(
    harness: RolloutHarness,
) -> None:
    paths = await stable_pair(harness)
    handle = await harness.start(changeset(paths, [NEW[0], {"max_connections": 0}]))
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidRolloutRequest"
    assert "/changes/1/value/max_connections" in cause.message
    for path, old in zip(paths, OLD, strict=True):
        assert harness.store.get_lock(NAMESPACE, path) is None
        assert [version.version for version in harness.store.list_versions(NAMESPACE, path)] == [
            version_id(old)
        ]
        assert all(
            entry.workflow_id != handle.id for entry in harness.store.history(NAMESPACE, path)
        )


async def test_a_path_held_by_a_running_rollout_refuses_the_changeset_taking_no_lock(
    harness: RolloutHarness,
) -> None:
    paths = await stable_pair(harness)
    holder = await harness.start(
        {
            "path": paths[1],
            "namespace": NAMESPACE,
            "value": {"max_connections": 999},
            "stages": [{"channel": "canary", "cooldown": "1h"}],
        },
        real_clock=True,
        workflow_id=f"holder-{uuid.uuid4().hex[:6]}",
    )
    await wait_for_state(holder, "holding", stage_index=0)

    refused = await harness.start(changeset(paths, NEW))
    with pytest.raises(WorkflowFailureError) as failure:
        await refused.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RolloutAlreadyRunning"
    assert f"{NAMESPACE}/{paths[1]}" in cause.message and holder.id in cause.message
    assert harness.store.get_lock(NAMESPACE, paths[0]) is None
    held = harness.store.get_lock(NAMESPACE, paths[1])
    assert held is not None and held.workflow_id == holder.id
    await holder.signal("halt", {})
    await rollout_result(holder)


async def test_the_multi_path_get_never_mixes_before_and_after(harness: RolloutHarness) -> None:
    """Poll while the changeset publishes its 100 % stage, is halted, and again: every answer is
    all old or all new."""
    paths = await stable_pair(harness)
    client_id = "host-mixed"
    async with live_api(harness.store) as url, httpx.AsyncClient(base_url=url) as api:
        seen: set[str] = set()
        stop = asyncio.Event()

        async def poll() -> None:
            while not stop.is_set():
                values = await multi_get(api, paths, client_id)
                assert values in (OLD, NEW), values
                seen.add("new" if values == NEW else "old")

        poller = asyncio.create_task(poll())
        for _ in range(3):
            handle = await harness.start(
                changeset(paths, NEW, stages=[{"percentile": 100, "cooldown": "1h"}]),
                real_clock=True,
            )
            await wait_for_state(handle, "holding", stage_index=0)
            await eventually(lambda: "new" in seen, what="a poll sees the new values")
            await handle.signal("halt", {"reason": "again"})
            assert (await rollout_result(handle))["outcome"] == "halted"
            seen.discard("old")
            await eventually(lambda: "old" in seen, what="a poll sees the old values")
            seen.clear()
        stop.set()
        await poller


async def test_halt_by_any_path_reaches_the_changeset(harness: RolloutHarness) -> None:
    """The admin API's `{path}:halt` given the changeset's second path halts its workflow (the
    lock holder), whatever id it runs under."""
    from tempoconf.api.app import create_app
    from tempoconf.settings import Settings

    paths = await stable_pair(harness)
    handle = await start_held(harness, paths)
    settings = Settings(task_queue=harness.task_queue)
    app = create_app(harness.store, settings, temporal_client=harness.realtime_client)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api,
    ):
        answer = await api.post(
            f"/v1/admin/rollouts/{paths[1]}:halt",
            params={"namespace": NAMESPACE},
            json={"reason": "from the second path"},
        )
        assert answer.status_code == 200, answer.text
    assert (await rollout_result(handle))["outcome"] == "halted"


def test_the_workflow_type_is_the_one_documented() -> None:
    assert WORKFLOW_TYPE == "ConfigRollout"


async def test_a_terminated_changeset_is_swept_config_by_config(harness: RolloutHarness) -> None:
    """The worker's sweep ends a terminated changeset in every config's trail and frees every lock."""
    from tempoconf.activities.abandoned import sweep_once

    paths = await stable_pair(harness)
    handle = await start_held(harness, paths)
    await handle.terminate("operator gave up")
    await eventually(
        lambda: sweep_once(harness.realtime_client, harness.store),
        what="the sweep ends the terminated changeset",
    )
    await eventually(
        lambda: all(harness.store.get_lock(NAMESPACE, path) is None for path in paths),
        what="every lock of the changeset released",
    )
    for path in paths:
        actions = [
            entry.action
            for entry in harness.store.history(NAMESPACE, path)
            if entry.workflow_id == handle.id
        ]
        assert actions[-1] == "rollout.terminated", actions


# -- issue 25: one digest, and TempoconfPaths --------------------------------------------------


def planned_digest(store: Store, request: dict[str, Any]) -> str:
    """The digest `rollout plan` and `POST /v1/admin/plans` give `request` (their one function)."""
    validated = validate_rollout(request, store)
    return plan_digest(plan_from_request(validated.request, validated.version))


async def test_the_running_digest_is_the_plans_and_approvals_naming_it_promote(
    harness: RolloutHarness,
) -> None:
    paths = await stable_pair(harness)
    request = changeset(
        paths,
        NEW,
        stages=[{"percentile": 50, "cooldown": "0s", "manual": True, "approvals": {"required": 2}}],
    )
    digest = planned_digest(harness.store, request)
    handle = await harness.start(request, real_clock=True)
    progress = await wait_for_state(handle, "awaiting_approval", stage_index=0)
    assert progress["digest"] == digest
    assert progress["change_summaries"] == [
        "max_connections 100 → 111",
        "max_connections 200 → 222",
    ]
    first = await handle.execute_update("approve", {"by": "bob", "digest": digest})
    assert first["accepted"], first
    await handle.execute_update("approve", {"by": "carol", "digest": digest})
    assert (await handle.result())["outcome"] == "promoted"


async def attributes_of(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    described = await handle.describe()
    return {key.name: value for key, value in described.typed_search_attributes}


async def test_tempoconf_paths_finds_a_changeset_by_any_of_its_configs(
    harness: RolloutHarness,
) -> None:
    paths = await stable_pair(harness)
    handle = await start_held(harness, paths)

    async def listed() -> bool:
        # Running: the set-up rollout that made paths[1] stable is listed under it too
        query = f'TempoconfPaths="{paths[1]}" AND ExecutionStatus="Running"'
        found = [execution.id async for execution in harness.client.list_workflows(query)]
        assert found == [handle.id], found
        return True

    await eventually(listed, what="the changeset listed by its second config")
    attributes = await attributes_of(handle)
    assert attributes[PATHS_ATTRIBUTE_NAME] == paths
    assert attributes["TempoconfPath"] == paths[0]  # as it always was: the first config's
    await handle.execute_update("halt", {"reason": "done"})

    single = await harness.start({"path": paths[0], "namespace": NAMESPACE, "value": OLD[0]})
    await single.result()
    assert (await attributes_of(single))[PATHS_ATTRIBUTE_NAME] == [paths[0]]


async def test_a_namespace_without_tempoconf_paths_runs_changesets_without_it(
    tmp_path: Any,
) -> None:
    """An upgraded deployment whose namespace lacks TempoconfPaths and whose worker may not
    register it (Temporal Cloud): prepare finds it missing, the workflow never upserts it (an
    unregistered upsert would fail every workflow task: the rollout would hang), and the
    changeset runs to its end with the four attributes it always had."""
    older = [key for key in SEARCH_ATTRIBUTES if key.name != PATHS_ATTRIBUTE_NAME]
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_cli_path()),
        search_attributes=older,
        dev_server_extra_args=["--log-level", "error"],
    )
    try:
        registered = await registered_search_attributes(env.client, env.client.namespace)
        assert PATHS_ATTRIBUTE_NAME not in registered
        async with sqlite_harness(env, env.client, tmp_path) as older_harness:
            paths = [unique_path(), unique_path()]
            handle = await older_harness.start(changeset(paths, NEW, stages=[]))
            result = await asyncio.wait_for(handle.result(), timeout=60)
            assert result["outcome"] == "promoted"
            attributes = await attributes_of(handle)
            assert PATHS_ATTRIBUTE_NAME not in attributes
            assert attributes["TempoconfPath"] == paths[0]
            assert attributes["TempoconfState"] == "promoted"

            # Where the worker may register it (`tempoconf worker` does at its start), it does,
            # as a KeywordList; the next prepare finds it and the next changeset carries it.
            registered = await ensure_search_attributes(env.client, env.client.namespace)
            assert PATHS_ATTRIBUTE_NAME in registered
            listed = await env.client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=env.client.namespace)
            )
            kind = listed.custom_attributes[PATHS_ATTRIBUTE_NAME]
            assert kind == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST
            handle = await older_harness.start(changeset(paths, OLD, stages=[]))
            assert (await asyncio.wait_for(handle.result(), timeout=60))["outcome"] == "promoted"
            assert (await attributes_of(handle))[PATHS_ATTRIBUTE_NAME] == paths
    finally:
        await env.shutdown()
