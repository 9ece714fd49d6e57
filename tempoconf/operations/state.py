"""Read a config's rollout: the store's lock and active rollout, and the workflow `rollout status`
shows (tempoconf.operations.view: the run's progress and what the store adds), or why Temporal
could not tell it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
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
from tempoconf.temporal.names import rollout_workflow_id

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
    """`snapshot` is set when the workflow could be read, else `unreadable` says why; `context`
    too when the workflow was read, or found but did not answer (`no_answer`: no worker), so that
    the store's side of the rollout is shown at once, with `lock` and `rollout`."""
    unreadable: WorkflowUnreadable | None = None


async def read_rollout_state(
    store: Callable[[], Store],
    temporal: TemporalAccess,
    namespace: str,
    path: str,
    explicit: str | None,
) -> RolloutState:
    """The state of the rollout of `namespace/path` (`explicit`: of that workflow id). `store()`
    opens the store (the CLI's first use opens it; the API's is open): it runs in a thread while
    the workflow the store most likely names is read, so that a workflow that does not answer
    (no worker) costs its query's bound once, not after the store's own time."""

    def records() -> tuple[Store, LockRecord | None, RolloutRecord | None, str]:
        opened = store()
        return (
            opened,
            opened.get_lock(namespace, path),
            opened.get_rollout(namespace, path),
            find_workflow_id(opened, namespace, path, explicit),
        )

    client: Client | None = None
    unreadable: WorkflowUnreadable | None = None
    try:
        client = await temporal.client()
    except Unavailable as error:
        unreadable = WorkflowUnreadable("unavailable", error.message, error.message)
    # --id, else the default id: the one the lock (or the audit log) names in the usual case.
    guess = explicit or rollout_workflow_id(namespace, path)
    early = (
        asyncio.create_task(_snapshot(client, temporal.where, guess))
        if client is not None
        else None
    )
    try:
        opened, lock, rollout, workflow_id = await asyncio.to_thread(records)
    except BaseException:
        await _cancelled(early)
        raise
    snapshot = None
    if client is not None and early is not None:
        if workflow_id == guess:
            snapshot, unreadable = await early
        else:
            await _cancelled(early)
            snapshot, unreadable = await _snapshot(client, temporal.where, workflow_id)
    if snapshot is None:
        context = None
        if unreadable is not None and unreadable.kind == "no_answer":
            held = lock if lock is not None and lock.workflow_id == workflow_id else None
            record = rollout if rollout is not None and rollout.workflow_id == workflow_id else None
            run_id = held.run_id if held else record.run_id if record else None
            version = held.version if held else record.version if record else None
            context = await asyncio.to_thread(
                store_context, opened, namespace, path, workflow_id, run_id, version
            )
        return RolloutState(namespace, path, lock, rollout, workflow_id, None, context, unreadable)
    version = (snapshot.progress or {}).get("version") or snapshot.result_version
    context = await asyncio.to_thread(
        store_context, opened, namespace, path, workflow_id, snapshot.run_id, version
    )
    return RolloutState(namespace, path, lock, rollout, workflow_id, snapshot, context)


async def _cancelled(task: asyncio.Task[object] | None) -> None:
    """Cancel the read of a workflow the store did not name: whatever it ends with is unused."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


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
        elif error.kind == "no_answer":  # Temporal answered; the workflow (no worker) did not
            message = f"the workflow {workflow_id!r} did not answer: {error.detail}"
        elif isinstance(cause, RPCError) and temporal_unavailable(cause):
            message = f"{where} did not answer: {error.detail}"
        elif error.kind == "query_failed":
            message = f"the workflow could not answer `status`: {error.detail}"
        else:
            message = f"{where}: {error.detail}"
        return None, WorkflowUnreadable(error.kind, error.detail, message)
