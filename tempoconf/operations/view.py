"""What `rollout status` shows of one rollout, read the same way by the CLI (direct mode) and by
the admin API (`GET /v1/admin/rollouts/{path}`, which the CLI reads in API mode): the workflow
(`describe`, the `status` query, its result once it ended) and what the store adds (who started it
and why, the version's metadata, the current stable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from tempoconf.rollout.outcomes import await_rollout_ending
from tempoconf.temporal.names import rollout_workflow_id

if TYPE_CHECKING:
    # Imported where a snapshot is read, not here: the API-mode CLI formats snapshots it gets
    # over HTTP and never loads the Temporal client (half of a command's start-up).
    from temporalio.client import Client

__all__ = [
    "CLOSED_QUERY_TIMEOUT",
    "RPC_TIMEOUT",
    "STATUS_QUERY_TIMEOUT",
    "RolloutSnapshot",
    "SnapshotUnavailable",
    "StoreContext",
    "UnavailableKind",
    "fetch_snapshot",
    "find_workflow_id",
    "read_snapshot",
    "store_context",
    "unavailable_message",
]

RPC_TIMEOUT = timedelta(seconds=15)
STATUS_QUERY_TIMEOUT = timedelta(seconds=1)
"""How long the `status` query waits. Temporal hands a query to a worker polling the workflow's task
queue and waits for one: without a worker it would wait out RPC_TIMEOUT, while the store already
knows the rollout's state (tempoconf.operations.state shows that instead). A polling worker answers
in milliseconds; 1 s leaves room for a busy one and keeps the whole `rollout status`, start-up
included (about half a second), under the 2 s an operator should wait."""
# A closed workflow's query needs a worker to replay its whole history, slower than a running
# one's answer from the worker's cache; without a worker, show the result only.
CLOSED_QUERY_TIMEOUT = timedelta(seconds=5)

UnavailableKind = Literal["not_found", "no_answer", "rpc", "query_failed"]
"""Why Temporal could not tell: no such workflow; `no_answer`: the running workflow did not answer
its `status` query in STATUS_QUERY_TIMEOUT (no worker polls its task queue); another RPC error
(Temporal itself unreachable or timed out); the query failed in the workflow."""


@dataclass
class RolloutSnapshot:
    """What the workflow says about one rollout at one moment."""

    workflow_id: str
    run_id: str | None
    execution: str
    """Running, Completed, Failed, Canceled, Terminated, ... (as Temporal names it)."""
    running: bool
    progress: dict[str, Any] | None = None
    """The `status` query's object; None when no worker could answer for a closed run."""
    outcome: str | None = None
    """The result's outcome once the run closed (or failed/cancelled/terminated/timed_out when it
    ended without one): tempoconf.rollout.outcomes.rollout_ending."""
    result_version: str | None = None
    result: dict[str, Any] | None = None
    """The rollout's result once it ended with one, whatever Temporal's close status (a reverted
    run fails with it, a cancelled one keeps it in its memo)."""
    reason: str = ""
    starter: str = ""
    """The identity of whoever started the run (e.g. `temporal-cli:alice@laptop`), from its history."""


@dataclass
class StoreContext:
    """What the store adds to the view: who started the run, the version's metadata, the stable."""

    started_by: str = ""
    started_at: datetime | None = None
    start_reason: str = ""
    author: str = ""
    commit: str = ""
    message: str = ""
    stable: str | None = None
    notes: list[str] = field(default_factory=list)


class SnapshotUnavailable(Exception):
    """Temporal could not tell the rollout's state: `kind` says why, `detail` is its message."""

    def __init__(self, kind: UnavailableKind, detail: str) -> None:
        super().__init__(detail)
        self.kind: UnavailableKind = kind
        self.detail = detail


def unavailable_message(kind: str, detail: str, *, workflow_id: str, name: str) -> str:
    """What an operator reads when the state of `workflow_id` (config `name`) cannot be read."""
    if kind == "not_found":
        return f"no rollout of {name} found (workflow id {workflow_id!r})"
    if kind == "no_answer":
        return f"the workflow {workflow_id!r} did not answer: {detail}"
    if kind == "query_failed":
        return f"the workflow {workflow_id!r} could not answer `status`: {detail}"
    return f"cannot read the status of {workflow_id!r}: {detail}"


def find_workflow_id(store: Any, namespace: str, path: str, explicit: str | None = None) -> str:
    """--id, else the lock holder (running), else the active rollout's, else the newest workflow of
    the audit log, else the CLI's default id: so an ended rollout started with any id is found."""
    if explicit:
        return explicit
    lock = store.get_lock(namespace, path)
    if lock is not None:
        return str(lock.workflow_id)
    rollout = store.get_rollout(namespace, path)
    if rollout is not None:
        return str(rollout.workflow_id)
    for entry in reversed(store.history(namespace, path, limit=50)):
        if entry.workflow_id:
            return str(entry.workflow_id)
    return rollout_workflow_id(namespace, path)


def store_context(
    store: Any, namespace: str, path: str, workflow_id: str, run_id: str | None, version: str | None
) -> StoreContext:
    context = StoreContext()
    for entry in reversed(store.history(namespace, path, limit=500)):
        if entry.action != "rollout.started" or entry.workflow_id != workflow_id:
            continue
        if run_id and entry.details.get("run_id") not in (None, run_id):
            continue
        context.started_by, context.started_at, context.start_reason = (
            entry.actor,
            entry.at,
            entry.reason,
        )
        break
    if version:
        record = store.get_version(namespace, path, version)
        if record is not None:
            context.author, context.commit, context.message = (
                record.author,
                record.commit,
                record.message,
            )
    stable = store.get_stable(namespace, path)
    context.stable = stable.version if stable is not None else None
    return context


async def fetch_snapshot(client: Client, workflow_id: str) -> RolloutSnapshot:
    """Describe the newest run of `workflow_id`, query its status and, once closed, its result.

    Raises RPCError (NOT_FOUND when there is no such workflow), WorkflowQueryFailedError, and
    SnapshotUnavailable (`no_answer`) when the running workflow does not answer its query."""
    from temporalio.client import WorkflowExecutionStatus, WorkflowQueryFailedError
    from temporalio.service import RPCError, RPCStatusCode

    description = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=RPC_TIMEOUT)
    running = description.status == WorkflowExecutionStatus.RUNNING
    execution = description.status.name.title() if description.status else "Unknown"
    handle = client.get_workflow_handle(workflow_id, run_id=description.run_id)
    snapshot = RolloutSnapshot(workflow_id, description.run_id, execution, running)
    snapshot.starter = await _starter_identity(handle)
    if running:
        try:
            progress = await handle.query("status", rpc_timeout=STATUS_QUERY_TIMEOUT)
        except RPCError as error:
            if error.status not in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise
            seconds = STATUS_QUERY_TIMEOUT.total_seconds()
            raise SnapshotUnavailable(
                "no_answer",
                f"no worker answered its status query within {seconds:g}s (is a worker polling "
                f"the task queue {description.task_queue!r}, and not too busy to answer?)",
            ) from error
        snapshot.progress = dict(progress)
        return snapshot
    try:
        snapshot.progress = dict(await handle.query("status", rpc_timeout=CLOSED_QUERY_TIMEOUT))
    except (RPCError, WorkflowQueryFailedError):
        snapshot.progress = None  # no worker to replay it: the result below still tells the end
    ending = await await_rollout_ending(
        handle, follow_runs=False, description=description, rpc_timeout=RPC_TIMEOUT
    )
    snapshot.result = ending.result_json
    snapshot.outcome = ending.outcome
    snapshot.result_version = ending.result.version if ending.result is not None else None
    snapshot.reason = ending.reason
    return snapshot


async def read_snapshot(client: Client, workflow_id: str) -> RolloutSnapshot:
    """`fetch_snapshot`, its failures as SnapshotUnavailable."""
    from temporalio.client import WorkflowQueryFailedError
    from temporalio.service import RPCError, RPCStatusCode

    try:
        return await fetch_snapshot(client, workflow_id)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise SnapshotUnavailable("not_found", error.message) from error
        raise SnapshotUnavailable("rpc", error.message) from error
    except WorkflowQueryFailedError as error:
        raise SnapshotUnavailable("query_failed", str(error)) from error


async def _starter_identity(handle: Any) -> str:
    from temporalio.service import RPCError

    try:
        async for event in handle.fetch_history_events(page_size=1, rpc_timeout=RPC_TIMEOUT):
            return str(event.workflow_execution_started_event_attributes.identity)
    except RPCError:
        pass  # only a nicety of the header
    return ""
