"""Ends the rollouts whose workflow ended without running its own end (issue 12, hole 7).

A terminated (`temporal workflow terminate`) or timed-out workflow runs no more code: no revert,
no final audit entry, its config's lock left held. Not an activity, for that reason: a loop the
worker runs beside its activities. Every `interval` it looks at the store's locks, asks Temporal
whether each holder still runs, and ends those that do not: the final audit entry
(`rollout.terminated`, `rollout.timed_out`, ... with the actor and reason Temporal recorded) and
the lock released, in one transaction, keyed like the run's own revert, so a run ends in the audit
log once however many workers sweep. Its stages lapse at their `expires_at`, as documented.

A holder Temporal does not know (another namespace, or its history deleted) is left alone: the
next rollout of the config reclaims such a lock, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistoryEventFilterType
from temporalio.service import RPCError, RPCStatusCode

from tempoconf.rollout.changesets import change_event_key
from tempoconf.storable import storable_text
from tempoconf.store.records import LockRecord
from tempoconf.store.store import Store

__all__ = [
    "DEFAULT_SWEEP_INTERVAL",
    "RunEnding",
    "end_run",
    "holder_ending",
    "sweep_abandoned",
    "sweep_once",
]

DEFAULT_SWEEP_INTERVAL = 5.0
"""Seconds between two sweeps (`TEMPOCONF_SWEEP_INTERVAL`): a terminated rollout's final entry
and lock release follow within about this long."""
_RPC_TIMEOUT = timedelta(seconds=10)
_MAX_REASON = 2000
_MAX_ACTOR = 200

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunEnding:
    """How a lock holder's workflow ended, as Temporal recorded it (its text made storable)."""

    outcome: str
    """`terminated`, `timed_out`, `failed`, `completed` or `canceled` (the execution status)."""
    actor: str
    reason: str

    def __post_init__(self) -> None:
        # Temporal's text cannot be refused: what the store cannot keep (a NUL) is replaced.
        object.__setattr__(self, "actor", storable_text(self.actor[:_MAX_ACTOR]))
        object.__setattr__(self, "reason", storable_text(self.reason[:_MAX_REASON]))


async def holder_ending(client: Client, holder: LockRecord) -> RunEnding | None:
    """How the lock's holder ended; None while it runs, or when Temporal does not know it.

    A rollout holds the lock under its first run's id for its whole life: a run that continued
    as new runs on as the latest run of its chain, which decides."""
    try:
        handle = client.get_workflow_handle(holder.workflow_id, run_id=holder.run_id)
        description = await handle.describe(rpc_timeout=_RPC_TIMEOUT)
        if description.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
            handle = client.get_workflow_handle(holder.workflow_id)
            description = await handle.describe(rpc_timeout=_RPC_TIMEOUT)
            chain = description.raw_description.workflow_execution_info.first_run_id
            if chain != holder.run_id:
                return None  # the id was reused by a later rollout; this chain's end is unknown
            handle = client.get_workflow_handle(holder.workflow_id, run_id=description.run_id)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    status = description.status
    if status is None or status in (
        WorkflowExecutionStatus.RUNNING,
        WorkflowExecutionStatus.CONTINUED_AS_NEW,
    ):
        return None
    close = None
    async for event in handle.fetch_history_events(
        event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT, rpc_timeout=_RPC_TIMEOUT
    ):
        close = event
    return _ending(status, close)


def _ending(status: WorkflowExecutionStatus, close: HistoryEvent | None) -> RunEnding:
    outcome = status.name.lower()
    if close is not None and close.HasField("workflow_execution_terminated_event_attributes"):
        terminated = close.workflow_execution_terminated_event_attributes
        reason = terminated.reason or "terminated without a reason"
        return RunEnding(
            outcome, terminated.identity or "temporal", f"workflow terminated: {reason}"
        )
    if status == WorkflowExecutionStatus.TIMED_OUT:
        return RunEnding(outcome, "temporal", "workflow timed out (its execution or run timeout)")
    return RunEnding(outcome, "temporal", f"workflow ended ({outcome}) without releasing its lock")


def end_run(store: Store, holder: LockRecord, ending: RunEnding, *, changeset: bool) -> bool:
    """End the lock's holder as it ended (`Store.end_abandoned_run`), keyed as its revert of this
    config (`changeset`: the run holds several configs), so a run that reverted (and then was
    terminated) ends once. False when it was ended already, or no longer holds the lock."""
    return store.end_abandoned_run(
        holder.namespace,
        holder.path,
        run_id=holder.run_id,
        workflow_id=holder.workflow_id,
        outcome=ending.outcome,
        actor=ending.actor,
        reason=ending.reason,
        event_key=change_event_key(
            f"{holder.run_id}:revert", holder.namespace, holder.path, changeset=changeset
        ),
    )


async def sweep_once(client: Client, store: Store) -> int:
    """One sweep; the number of runs it ended."""
    ended = 0
    locks = await asyncio.to_thread(store.list_locks)
    # A changeset's run holds several locks: each config's row has its own key (as its revert's).
    locks_per_run = Counter(holder.run_id for holder in locks)
    for holder in locks:
        ending = await holder_ending(client, holder)
        if ending is None:
            continue
        done = await asyncio.to_thread(
            end_run, store, holder, ending, changeset=locks_per_run[holder.run_id] > 1
        )
        if done:
            ended += 1
            log.info(
                "rollout %s of %s/%s ended as %s (%s); its lock is released",
                holder.workflow_id,
                holder.namespace,
                holder.path,
                ending.outcome,
                ending.reason,
            )
    return ended


async def sweep_abandoned(
    client: Client, store: Store, *, interval: float = DEFAULT_SWEEP_INTERVAL
) -> None:
    """Sweep every `interval` seconds until cancelled. A failed sweep (store or Temporal down) is
    logged once per outage, at WARNING, and tried again at the next interval."""
    failing = False
    while True:
        try:
            await sweep_once(client, store)
            if failing:
                log.info("sweeping ended rollouts works again")
            failing = False
        except Exception as error:  # an outage: the next round tries again
            if not failing:
                log.warning("cannot sweep ended rollouts (will retry): %s", _first_line(error))
            failing = True
        await asyncio.sleep(interval)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300] if text else ''}"
