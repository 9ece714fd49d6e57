"""Whether the holder of a config's lock still runs: asked by whoever would take the lock (the
prepare activity, which reclaims a lock whose holder ended) and by whoever starts a rollout (the
CLI and the admin API, which refuse a start the prepare activity would refuse)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported where used: the API-mode CLI imports this package without the Temporal SDK.
    from temporalio.client import Client

__all__ = ["lock_holder_running"]


async def lock_holder_running(
    client: Client, workflow_id: str, run_id: str | None, *, rpc_timeout: timedelta | None = None
) -> bool:
    """Whether the lock's holder still runs. A rollout holds the lock under its first run's id for
    its whole life: a run that continued as new runs on as a later run of its chain. A workflow
    Temporal does not know (NOT_FOUND) does not run; any other RPCError is raised."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    try:
        description = await client.get_workflow_handle(workflow_id, run_id=run_id).describe(
            rpc_timeout=rpc_timeout
        )
        if description.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
            return description.status == WorkflowExecutionStatus.RUNNING
        latest = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=rpc_timeout)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    chain = latest.raw_description.workflow_execution_info.first_run_id
    return latest.status == WorkflowExecutionStatus.RUNNING and chain == run_id
