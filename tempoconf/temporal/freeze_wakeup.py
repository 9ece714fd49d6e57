"""When a freeze ends, tell the rollouts waiting on one to look again now.

A frozen rollout looks at the freezes again at the freeze's `until` and every 30 s (a worker
setting): without a word, `freeze end` would take up to that long to be seen. Whoever ends a
freeze (`tempoconf freeze end`, `POST /v1/admin/freezes/{namespace}:end`) then signals every
running rollout that Temporal's visibility shows in state `frozen`, in any namespace: a changeset
is held by a freeze of any of its namespaces, and its workflow id names only one. A rollout still
frozen by another freeze looks, finds it, and waits on. Visibility lags its workflows by a moment,
so one frozen just before may be missed: it looks again at its next look, as before.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from tempoconf.rollout.progress import RolloutState
from tempoconf.temporal.names import FREEZE_ENDED_SIGNAL, STATE_ATTRIBUTE, WORKFLOW_TYPE

__all__ = [
    "FROZEN_ROLLOUTS_QUERY",
    "SIGNALS_IN_FLIGHT",
    "TELL_TIMEOUT_SECONDS",
    "tell_frozen_rollouts",
]

TELL_TIMEOUT_SECONDS = 10.0
"""How long whoever ends a freeze gives telling the rollouts, before it reports the end without."""
SIGNALS_IN_FLIGHT = 20
"""At most this many signals at a time: a freeze may hold hundreds of rollouts, and a namespace's
frontend limits its requests per second."""

FROZEN_ROLLOUTS_QUERY = (
    f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
    f"AND {STATE_ATTRIBUTE.name} = '{RolloutState.FROZEN.value}'"
)


async def tell_frozen_rollouts(client: Client, namespace: str) -> int:
    """Signal `FREEZE_ENDED_SIGNAL` (with the namespace whose freeze ended) to every running
    rollout visibility shows frozen; returns how many got it. A rollout that ended in between
    is skipped; any other failure (Temporal unreachable) raises."""
    workflow_ids = [
        execution.id async for execution in client.list_workflows(FROZEN_ROLLOUTS_QUERY)
    ]

    in_flight = asyncio.Semaphore(SIGNALS_IN_FLIGHT)

    async def tell(workflow_id: str) -> bool:
        async with in_flight:
            try:
                await client.get_workflow_handle(workflow_id).signal(FREEZE_ENDED_SIGNAL, namespace)
            except RPCError as error:
                if error.status == RPCStatusCode.NOT_FOUND:
                    return False  # it ended since visibility listed it
                raise
        return True

    told = await asyncio.gather(*(tell(workflow_id) for workflow_id in workflow_ids))
    return sum(told)
