"""Start a rollout (or a rollback: a rollout of a stored version): validated and previewed exactly
as the workflow's prepare step will (`plan_rollout`, which starts nothing: `rollout plan`,
`POST /v1/admin/plans`), refused while the lock's holder still runs, then started in Temporal."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tempoconf.operations.errors import Conflict, Invalid
from tempoconf.operations.preview import RolloutPreview, preview_rollout
from tempoconf.operations.temporal_access import RPC_TIMEOUT, TemporalAccess, temporal_calls
from tempoconf.store.records import LockRecord
from tempoconf.temporal.lock_holder import lock_holder_running
from tempoconf.temporal.names import WORKFLOW_TYPE, request_workflow_id, workflow_id_problem

if TYPE_CHECKING:
    from tempoconf.store.store import Store

__all__ = [
    "AlreadyRunning",
    "LockBusy",
    "StartedRollout",
    "plan_rollout",
    "start_rollout",
    "started_workflow_id",
]


@dataclass(frozen=True)
class StartedRollout:
    workflow_id: str
    run_id: str | None
    """The first run's id (None: Temporal did not say)."""


class LockBusy(Conflict):
    """A running rollout holds the lock of a config the request rolls out."""

    def __init__(self, preview: RolloutPreview, lock: LockRecord) -> None:
        request = preview.request
        super().__init__(
            f"config {request.path!r} in namespace {request.namespace!r} already has a running "
            f"rollout: workflow {lock.workflow_id!r} (run {lock.run_id}) of version "
            f"{lock.version}; halt or bypass it first"
        )
        self.lock = lock


class AlreadyRunning(Conflict):
    """The workflow id is taken by a running workflow."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"workflow {workflow_id!r} is already running")
        self.workflow_id = workflow_id


async def plan_rollout(store: Store, raw: Any) -> RolloutPreview:
    """What the request would do; InvalidRequestError with every problem. Nothing is stored or
    started."""
    from tempoconf.rollout.validation import validate_rollout  # loads jsonschema

    def plan() -> RolloutPreview:
        return preview_rollout(validate_rollout(raw, store), store)

    return await asyncio.to_thread(plan)


def started_workflow_id(preview: RolloutPreview, explicit: str | None) -> str:
    """The workflow id a start uses: the request's own, or `explicit` when it is one of the
    request's (tempoconf.temporal.names.workflow_id_problem); Invalid else, saying which are."""
    if not explicit:
        return request_workflow_id(preview.request)
    problem = workflow_id_problem(preview.request, explicit)
    if problem is not None:
        raise Invalid(f"invalid workflow_id: {problem}")
    return explicit


async def start_rollout(
    temporal: TemporalAccess,
    raw: Any,
    preview: RolloutPreview,
    *,
    task_queue: str,
    workflow_id: str | None = None,
) -> StartedRollout:
    """Start the workflow of `raw` (the request as sent: the workflow validates it again), whose
    `preview` is `plan_rollout`'s. LockBusy while the lock's holder runs (the prepare step would
    refuse it), AlreadyRunning when `workflow_id` (default: the request's) is taken, Invalid when
    it is not one of the request's own (`started_workflow_id`)."""
    from temporalio.exceptions import WorkflowAlreadyStartedError

    workflow_id = started_workflow_id(preview, workflow_id)
    client = await temporal.client()
    lock = preview.lock
    with temporal_calls(temporal.where):
        if lock is not None and await lock_holder_running(
            client, lock.workflow_id, lock.run_id, rpc_timeout=RPC_TIMEOUT
        ):
            raise LockBusy(preview, lock)
        try:
            handle = await client.start_workflow(
                WORKFLOW_TYPE,
                raw,
                id=workflow_id,
                task_queue=task_queue,
                static_summary=preview.summary(),
                static_details=preview.details(),
                rpc_timeout=RPC_TIMEOUT,
            )
        except WorkflowAlreadyStartedError:
            raise AlreadyRunning(workflow_id) from None
    return StartedRollout(workflow_id, handle.result_run_id)
