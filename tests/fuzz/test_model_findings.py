"""What the model check found, kept as explicit examples: rollouts that continue as new between
stages, and the starts and advances that meet them (tests/fuzz/test_model.py)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from tempoconf.cli._api_backend import ApiBackend
from tempoconf.cli._backend import (
    DirectBackend,
    LockBusy,
    OperatorCommandInput,
)
from tempoconf.settings import Settings
from tempoconf.store.store import Store
from tests.fixtures.waiting import eventually
from tests.fuzz.model_stack import (  # noqa: F401 (the model_* are this module's fixtures)
    NAMESPACE,
    ROOT,
    answered_view,
    model_realtime_client,
    model_temporal_env,
    operator_stack,
)

pytestmark = pytest.mark.fuzz


async def history_length(client: Client, workflow_id: str) -> int:
    return (await client.get_workflow_handle(workflow_id).describe()).history_length


@asynccontextmanager
async def continued_between_stages(
    store: Store, temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> AsyncIterator[tuple[ApiBackend, str, str, dict[str, Any]]]:
    """A two-stage rollout whose `advance` out of its first hold makes it continue as new before
    it publishes the second stage: the worker's history bound is set just above the history
    length a rollout has while it holds its first stage (measured on a first rollout). Yields the
    operator's backend, the config, the workflow id and the advance's answer."""
    request = {
        "path": "",
        "value": {"n": 1},
        "default_cooldown_time": "1h",
        "stages": [{"name": "canary", "channel": "canary"}, {"name": "all", "percentile": 100}],
    }
    async with operator_stack(store, temporal_env, tmp_path, continue_as_new_after_events=0) as (
        backends,
        _,
    ):
        backend = backends[ROOT]
        path = f"model/measure-{uuid.uuid4().hex[:8]}"
        measure = {**request, "path": path}
        measured = f"rollout:{NAMESPACE}/{path}:1"
        await backend.start(measure, await backend.prepare(measure), measured)
        await eventually(
            lambda: backend_state(backend, path, measured, "holding", 0),
            what="the measured rollout to hold its first stage",
        )
        holding = await history_length(realtime_client, measured)
        await backend.command(
            OperatorCommandInput(NAMESPACE, path, "halt", "measured", workflow_id=measured)
        )
    async with operator_stack(
        store, temporal_env, tmp_path, continue_as_new_after_events=holding + 2
    ) as (backends, _):
        backend = backends[ROOT]
        path = f"model/continued-{uuid.uuid4().hex[:8]}"
        rollout = {**request, "path": path}
        workflow_id = f"rollout:{NAMESPACE}/{path}:1"
        await backend.start(rollout, await backend.prepare(rollout), workflow_id)
        await eventually(
            lambda: backend_state(backend, path, workflow_id, "holding", 0),
            what="the rollout to hold its first stage",
        )
        answer = (
            await backend.command(
                OperatorCommandInput(NAMESPACE, path, "advance", "go on", workflow_id=workflow_id)
            )
        ).result
        await eventually(
            lambda: backend_state(backend, path, workflow_id, "holding", 1),
            what="the rollout to hold its second stage, in its next run",
        )
        description = await realtime_client.get_workflow_handle(workflow_id).describe()
        first_run = description.raw_description.workflow_execution_info.first_run_id
        assert description.run_id != first_run, "the rollout did not continue as new"
        try:
            yield backend, path, workflow_id, answer
        finally:
            await backend.command(
                OperatorCommandInput(
                    NAMESPACE, path, "halt", "end of test", workflow_id=workflow_id
                )
            )


async def backend_state(
    backend: ApiBackend, path: str, workflow_id: str, state: str, stage_index: int
) -> bool:
    snapshot = await answered_view(backend, path, workflow_id)
    progress = snapshot.progress or {}
    seen = (progress.get("state"), progress.get("stage_index"))
    assert seen == (state, stage_index), seen
    return True


async def test_a_start_is_refused_while_the_rollout_runs_on_after_continue_as_new(
    sqlite_store: Store,
    temporal_env: WorkflowEnvironment,
    realtime_client: Client,
    tmp_path: Path,
) -> None:
    """Found by the model check: the admin API judged the lock's holder by its first run, which
    had continued as new, and started a second rollout (202) that then failed in prepare with
    RolloutAlreadyRunning. A running rollout is refused up front: 409."""
    async with continued_between_stages(sqlite_store, temporal_env, realtime_client, tmp_path) as (
        backend,
        path,
        workflow_id,
        _,
    ):
        again = {"path": path, "value": {"n": 2}, "stages": [{"channel": "canary"}]}
        with pytest.raises(LockBusy) as busy:
            await backend.start(
                again, await backend.prepare(again), f"rollout:{NAMESPACE}/{path}:2"
            )
        assert busy.value.lock.workflow_id == workflow_id


async def test_an_advance_that_continues_as_new_between_stages_answers_requested(
    sqlite_store: Store,
    temporal_env: WorkflowEnvironment,
    realtime_client: Client,
    tmp_path: Path,
) -> None:
    """Found by the model check: the workflow answers an update once it is parked again; a
    continue-as-new between two stages parks it (every handler must finish before it), so
    `advance` answered before the next run published the next stage, as done ("the hold of stage
    1/2 canary ended early") with `state` checking_health, stage 1. docs/contract.md: it answers
    once the command took effect (the next stage held), or says `requested:`."""
    async with continued_between_stages(sqlite_store, temporal_env, realtime_client, tmp_path) as (
        _,
        _,
        _,
        answer,
    ):
        took_effect = (answer["state"], answer["stage_number"]) == ("holding", 2)
        assert took_effect or answer["message"].startswith("requested:"), answer


async def test_a_direct_start_is_refused_while_the_rollout_runs_on_after_continue_as_new(
    sqlite_url: str,
    sqlite_store: Store,
    temporal_env: WorkflowEnvironment,
    realtime_client: Client,
    tmp_path: Path,
) -> None:
    """The admin API's twin: `tempoconf rollout start` in direct mode (cli/_backend.py) judged
    the lock's holder by its first run, CONTINUED_AS_NEW, and started a workflow that failed in
    prepare with RolloutAlreadyRunning instead of refusing (LockBusy: exit 1, "already has a
    running rollout")."""
    async with continued_between_stages(sqlite_store, temporal_env, realtime_client, tmp_path) as (
        _,
        path,
        workflow_id,
        _,
    ):
        settings_ = Settings(
            data_dir=tmp_path,
            database_url=sqlite_url,
            temporal_address=temporal_env.client.service_client.config.target_host,
            task_queue=f"tempoconf-model-direct-{uuid.uuid4().hex[:8]}",  # no worker: never runs
        )
        again = {"path": path, "value": {"n": 2}, "stages": [{"channel": "canary"}]}
        with ExitStack() as stack:
            direct = DirectBackend(settings_, stack)
            prepared = await direct.prepare(again)
            try:
                with pytest.raises(LockBusy) as busy:
                    await direct.start(again, prepared, f"rollout:{NAMESPACE}/{path}:direct")
            finally:
                # What the bug starts (on a queue no worker polls) must not outlive the test.
                with contextlib.suppress(RPCError):
                    await realtime_client.get_workflow_handle(
                        f"rollout:{NAMESPACE}/{path}:direct"
                    ).terminate()
            assert busy.value.lock.workflow_id == workflow_id
