"""Which form of signed approval a run takes (issue 41), live on a real Temporal server and worker,
each approval signed by the API's own operation (tempoconf.operations.steer, as the admin API
sends it): a run started by the worker from before bound approvals keeps taking the older form
once today's worker runs it; a run of today names its first run's id as `approval_run`, and keeps
it across continue-as-new."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from tempoconf.access.signing import CommandSigner
from tempoconf.cli.worker import build_worker
from tempoconf.operations.steer import OperatorCommandInput, steer_rollout
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE
from tests.fixtures.temporal import rollout_result, sqlite_harness
from tests.fixtures.waiting import eventually
from tests.workflows.test_rollout import wait_for_state
from tests.workflows.worker_builds import ConfigRolloutBeforeApprovalForms

SIGNER = CommandSigner.generate()


class Reach:
    """How the operation reaches Temporal (tempoconf.operations.temporal_access.TemporalAccess)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self.where = "the test's Temporal server"

    async def client(self) -> Client:
        return self._client

    def redact(self, text: str) -> str:
        return text


def request_of(path: str, **fields: Any) -> dict[str, Any]:
    return {
        "path": path,
        "value": {"max_connections": 2000},
        "stages": [{"channel": "canary", "cooldown": "0s", "manual": True}],
        "author": "alice@example.com",
        "approval_key": SIGNER.public_key,
        **fields,
    }


async def approve(client: Client, store: Store, path: str, workflow_id: str, digest: str) -> Any:
    sent = await steer_rollout(
        lambda: store,
        Reach(client),
        OperatorCommandInput(
            namespace="default",
            path=path,
            name="approve",
            by="bob",
            digest=digest,
            workflow_id=workflow_id,
        ),
        signer=SIGNER,
    )
    return sent.result


async def test_a_run_started_before_keeps_taking_the_older_form(
    temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> None:
    path = f"forms/before-{uuid.uuid4().hex[:8]}"
    task_queue = f"tempoconf-forms-{uuid.uuid4().hex[:8]}"
    store = Store(f"sqlite:///{tmp_path / 'tempoconf.db'}", migrate=True)
    try:
        # started by the worker from before: its history records no approval form
        async with build_worker(
            temporal_env.client,
            store,
            task_queue=task_queue,
            workflows=[ConfigRolloutBeforeApprovalForms],
        ):
            handle = await realtime_client.start_workflow(
                WORKFLOW_TYPE, request_of(path), id=f"forms-{path}", task_queue=task_queue
            )
            progress = await wait_for_state(handle, "awaiting_approval", stage_index=0)
            assert progress["approval_run"] == ""
        # today's worker takes it over, replaying that history: the run keeps its form, and
        # the API signs in the form its status shows
        async with build_worker(temporal_env.client, store, task_queue=task_queue):
            answer = await approve(realtime_client, store, path, handle.id, progress["digest"])
            assert answer["accepted"] is True, answer
            assert (await rollout_result(handle))["outcome"] == "promoted"
    finally:
        store.close()


async def test_the_rollout_run_is_the_first_runs_and_survives_continue_as_new(
    temporal_env: WorkflowEnvironment, realtime_client: Client, tmp_path: Path
) -> None:
    path = f"forms/continued-{uuid.uuid4().hex[:8]}"
    async with sqlite_harness(
        temporal_env, realtime_client, tmp_path, continue_as_new_after_events=20
    ) as harness:
        handle = await harness.start(
            request_of(
                path,
                stages=[
                    {"channel": "canary", "cooldown": "0s"},
                    {"percentile": 50, "cooldown": "0s", "manual": True},
                ],
            ),
            real_clock=True,
        )
        first_run = handle.first_execution_run_id or handle.run_id
        latest = harness.realtime_client.get_workflow_handle(handle.id)

        async def continued_and_awaiting() -> dict[str, Any]:
            try:
                progress: dict[str, Any] = await latest.query("status", result_type=dict)
            except RPCError as error:  # the new run before its first task: not yet
                raise AssertionError(f"not queryable yet: {error}") from error
            assert (progress["state"], progress["stage_index"]) == ("awaiting_approval", 1)
            assert (await latest.describe()).run_id != first_run, "not continued as new"
            return progress

        progress = await eventually(
            continued_and_awaiting, what="the rollout to continue as new and await approval"
        )
        assert progress["approval_run"] == first_run
        answer = await approve(
            harness.realtime_client, harness.store, path, handle.id, progress["digest"]
        )
        assert answer["accepted"] is True, answer
        assert (await rollout_result(latest))["outcome"] == "promoted"
