"""Steer a running rollout: halt, bypass, advance, pause, resume or approve
(tempoconf.rollout.commands), each sent as the workflow's update of that name, whose short answer
(CommandResult) says what it did."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tempoconf.operations.errors import NotFound, Refused, Undelivered
from tempoconf.operations.temporal_access import RPC_TIMEOUT, TemporalAccess, temporal_unavailable
from tempoconf.temporal.names import rollout_workflow_id

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

    from tempoconf.access.signing import CommandSigner
    from tempoconf.store.store import Store

__all__ = ["CommandSent", "OperatorCommandInput", "failure_message", "steer_rollout"]


@dataclass(frozen=True)
class OperatorCommandInput:
    namespace: str
    path: str
    name: str
    """halt, bypass, advance, pause, resume or approve."""
    reason: str = ""
    by: str = ""
    """Who sends it (the audit trail's and four eyes' identity); empty: the transport names the
    caller (the CLI's user@host, the admin API's token)."""
    digest: str = ""
    """The plan's digest an approve names (tempoconf.rollout.approvals); only approve reads it."""
    workflow_id: str | None = None
    """The rollout's workflow; None: the lock holder's, else the active rollout's, else the
    default id of the config."""


@dataclass(frozen=True)
class CommandSent:
    workflow_id: str
    result: dict[str, Any]
    """The workflow's CommandResult as it answered it."""


def target_workflow(store: Store, namespace: str, path: str) -> str:
    """The lock holder's workflow, else the active rollout's, else the config's default id."""
    lock = store.get_lock(namespace, path)
    if lock is not None:
        return lock.workflow_id
    rollout = store.get_rollout(namespace, path)
    if rollout is not None:
        return rollout.workflow_id
    return rollout_workflow_id(namespace, path)


async def steer_rollout(
    open_store: Callable[[], Store],
    temporal: TemporalAccess,
    command: OperatorCommandInput,
    *,
    signer: CommandSigner | None = None,
) -> CommandSent:
    """Send `command`. Refused when the rollout refuses it, NotFound when no such workflow runs,
    Undelivered when Temporal could not take it. `open_store`: the store, opened only when the
    workflow must be looked up (a command with its workflow id needs none). `signer` (the admin
    API's, with an access policy on): a command the registry marks `signed` (approve) carries its
    signature over who (and the emails the signer vouches for), the workflow's run, the stage it
    awaits approval at, the command, the digest and a nonce, now; for a run started before
    those were bound, over who, the workflow, the command and the digest
    (tempoconf.rollout.signatures)."""
    from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateFailedError
    from temporalio.service import RPCError, RPCStatusCode

    from tempoconf.rollout.commands import COMMANDS

    name, namespace, path = command.name, command.namespace, command.path
    workflow_id = command.workflow_id
    if not workflow_id:
        workflow_id = await asyncio.to_thread(target_workflow, open_store(), namespace, path)
    client = await temporal.client()
    handle = client.get_workflow_handle(workflow_id)
    argument: dict[str, Any] = {"reason": command.reason, "by": command.by}
    if command.digest:
        argument["digest"] = command.digest
    spec = COMMANDS.get(name)
    try:
        if signer is not None and spec is not None and spec.signed:
            # Signed once the workflow is known, in the form its run takes.
            argument |= await _signed_fields(handle, signer, command)
        result = await handle.execute_update(name, argument, rpc_timeout=RPC_TIMEOUT)
    except WorkflowQueryFailedError as error:
        raise Undelivered(
            f"{name} not sent to {workflow_id!r}: the rollout did not answer its status query, "
            f"which the API asks before it signs an {name} ({error})"
        ) from None
    except WorkflowUpdateFailedError as error:
        raise Refused(
            f"{name} refused by the rollout {workflow_id!r}: {failure_message(error)}"
        ) from None
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(
                f"no running rollout of {namespace}/{path} (workflow id {workflow_id!r})"
            ) from None
        unavailable = temporal_unavailable(error)
        raise Undelivered(
            f"{name} could not be delivered to {workflow_id!r}: {error.message}",
            unavailable=f"{temporal.where} did not answer: {error.message}" if unavailable else "",
        ) from None
    return CommandSent(workflow_id, dict(result))


async def _signed_fields(
    handle: WorkflowHandle[Any, Any], signer: CommandSigner, command: OperatorCommandInput
) -> dict[str, Any]:
    """The signature fields of `command` for the run `handle` names, in the form it takes: its
    status (a query: the command needs the run's worker anyway) names the `approval_run` and
    the stage index a bound signature names; a run started before names none, and takes the
    older form."""
    progress = await handle.query("status", result_type=dict, rpc_timeout=RPC_TIMEOUT)
    rollout_run = progress.get("approval_run") or ""
    if not rollout_run:
        signature, signed_at = signer.sign_now(command.by, handle.id, command.name, command.digest)
        return {"signature": signature, "signed_at": signed_at}
    return signer.sign_bound(
        command.by,
        handle.id,
        command.name,
        command.digest,
        rollout_run=str(rollout_run),
        stage_index=int(progress.get("stage_index", -1)),
    )


def failure_message(error: BaseException) -> str:
    """The message of the first ApplicationError in a Temporal failure's causes."""
    from temporalio.exceptions import ApplicationError

    cause: BaseException | None = error
    while (
        cause is not None
        and cause.__cause__ is not None
        and not isinstance(cause, ApplicationError)
    ):
        cause = cause.__cause__
    return str(cause.message if isinstance(cause, ApplicationError) else cause)
