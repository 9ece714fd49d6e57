"""Read a config's rollout: the store's lock and active rollout, and the workflow `rollout status`
shows (tempoconf.operations.view: the run's progress and what the store adds), or why Temporal
could not tell it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tempoconf.operations.errors import Unavailable
from tempoconf.operations.temporal_access import TemporalAccess, temporal_unavailable
from tempoconf.operations.view import (
    RolloutSnapshot,
    SnapshotUnavailable,
    StoreContext,
    UnavailableKind,
    find_workflow_id,
    read_snapshot,
    store_context,
)
from tempoconf.store.records import LockRecord, RolloutRecord

if TYPE_CHECKING:
    from temporalio.client import Client

    from tempoconf.store.store import Store

__all__ = ["RolloutState", "WorkflowUnreadable", "read_rollout_state"]


@dataclass(frozen=True)
class WorkflowUnreadable:
    """Why the workflow's state could not be read."""

    kind: UnavailableKind | Literal["unavailable"]
    """SnapshotUnavailable's kind (not_found, no_answer, rpc, query_failed), or `unavailable`:
    Temporal could not be reached."""
    detail: str
    """Temporal's own message."""
    message: str
    """What an API caller reads (it names the Temporal)."""


@dataclass(frozen=True)
class RolloutState:
    namespace: str
    path: str
    lock: LockRecord | None
    rollout: RolloutRecord | None
    """The active rollout's record."""
    workflow_id: str
    """The workflow shown (find_workflow_id)."""
    snapshot: RolloutSnapshot | None
    context: StoreContext | None
    """Both set when the workflow could be read; else `unreadable` says why."""
    unreadable: WorkflowUnreadable | None = None


async def read_rollout_state(
    store: Store, temporal: TemporalAccess, namespace: str, path: str, explicit: str | None
) -> RolloutState:
    """The state of the rollout of `namespace/path` (`explicit`: of that workflow id)."""

    def records() -> tuple[LockRecord | None, RolloutRecord | None, str]:
        return (
            store.get_lock(namespace, path),
            store.get_rollout(namespace, path),
            find_workflow_id(store, namespace, path, explicit),
        )

    client: Client | None = None
    unreadable: WorkflowUnreadable | None = None
    try:
        client = await temporal.client()
    except Unavailable as error:
        unreadable = WorkflowUnreadable("unavailable", error.message, error.message)
    lock, rollout, workflow_id = await asyncio.to_thread(records)
    snapshot = None
    if client is not None:
        snapshot, unreadable = await _snapshot(client, temporal.where, workflow_id)
    if snapshot is None:
        return RolloutState(namespace, path, lock, rollout, workflow_id, None, None, unreadable)
    version = (snapshot.progress or {}).get("version") or snapshot.result_version
    context = await asyncio.to_thread(
        store_context, store, namespace, path, workflow_id, snapshot.run_id, version
    )
    return RolloutState(namespace, path, lock, rollout, workflow_id, snapshot, context)


async def _snapshot(
    client: Client, where: str, workflow_id: str
) -> tuple[RolloutSnapshot | None, WorkflowUnreadable | None]:
    from temporalio.service import RPCError

    try:
        return await read_snapshot(client, workflow_id), None
    except SnapshotUnavailable as error:
        cause = error.__cause__
        if error.kind == "not_found":
            message = f"no workflow {workflow_id!r} in {where}"
        elif isinstance(cause, RPCError) and temporal_unavailable(cause):
            message = f"{where} did not answer (is a worker running?): {error.detail}"
        elif error.kind == "query_failed":
            message = f"the workflow could not answer `status`: {error.detail}"
        else:
            message = f"{where}: {error.detail}"
        return None, WorkflowUnreadable(error.kind, error.detail, message)
