"""Which rollout an operator acts on, and every config it touches, found from the thing itself:
what the rollout wrote to the store (its locks, its rows, its audit trail) or, for one that has
written nothing yet, the request it was started with. An access check is made against those
namespaces, never against a parameter the caller chose beside them (docs/contract.md, Access: the
object decides the namespace)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tempoconf.operations.errors import NotFound, Unavailable
from tempoconf.operations.steer import target_workflow
from tempoconf.operations.temporal_access import RPC_TIMEOUT, TemporalAccess, temporal_calls
from tempoconf.operations.view import find_workflow_id
from tempoconf.paths import DEFAULT_NAMESPACE
from tempoconf.temporal.names import rollout_workflow_id

if TYPE_CHECKING:
    from tempoconf.store.store import Store

__all__ = ["ForeignWorkflow", "RolloutTarget", "find_rollout", "requested_configs"]

Config = tuple[str, str]


@dataclass(frozen=True)
class RolloutTarget:
    """The rollout of a config an operator names: its workflow and every config it touches."""

    workflow_id: str
    configs: tuple[Config, ...]
    """(namespace, path) of each config of the rollout: one, or a changeset's every config."""

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(namespace for namespace, _ in self.configs))


class ForeignWorkflow(NotFound):
    """A workflow id that no rollout of the named config has. Its message names only what the
    caller named: whether the id is another config's rollout, or nothing, is not told."""

    def __init__(self, namespace: str, path: str, workflow_id: str) -> None:
        super().__init__(
            f"no rollout of {namespace}/{path} has the workflow id {workflow_id!r} (a workflow "
            "id names one of the config's own rollouts: leave it out for the current one)"
        )


async def find_rollout(
    open_store: Callable[[], Store],
    temporal: TemporalAccess,
    namespace: str,
    path: str,
    explicit: str | None,
    *,
    running: bool,
) -> RolloutTarget:
    """The rollout of `namespace/path` that `explicit` names or, without it, the config's own:
    its lock holder, else its active rollout, else (`running` False: a read) the newest in its
    audit log, else the config's default id. Its configs are those the store ties to it; for a
    workflow the store knows nothing of (a rollout still preparing), those of the request it
    was started with, read from Temporal. ForeignWorkflow when it is no rollout of this config
    (or no workflow at all); Unavailable when Temporal cannot be asked."""

    def stored() -> tuple[str, list[Config] | None]:
        store = open_store()
        if explicit:
            workflow_id = explicit
        elif running:
            workflow_id = target_workflow(store, namespace, path)
        else:
            workflow_id = find_workflow_id(store, namespace, path)
        return workflow_id, store.workflow_configs(namespace, path, workflow_id)

    workflow_id, configs = await asyncio.to_thread(stored)
    if configs is not None:
        return RolloutTarget(workflow_id, tuple(configs))
    own = workflow_id == rollout_workflow_id(namespace, path)
    try:
        requested = await requested_configs(temporal, workflow_id)
    except Unavailable:
        if not own:
            raise
        requested = None  # the command or read itself says that Temporal did not answer
    if requested is not None:
        # A workflow the store knows nothing of yet: its own request decides, even under the
        # config's default id (the Temporal CLI takes any id for any request).
        if (namespace, path) not in requested:
            raise ForeignWorkflow(namespace, path, workflow_id)
        return RolloutTarget(workflow_id, tuple(requested))
    if not own:
        raise ForeignWorkflow(namespace, path, workflow_id)
    # No such workflow: the config's own id, for the config alone.
    return RolloutTarget(workflow_id, ((namespace, path),))


async def requested_configs(temporal: TemporalAccess, workflow_id: str) -> list[Config] | None:
    """The configs of the request the newest run of `workflow_id` was started with (every run's
    first input is the request as given); None: no such workflow, or not a rollout request."""
    from temporalio.service import RPCError, RPCStatusCode

    client = await temporal.client()
    handle = client.get_workflow_handle(workflow_id)
    try:
        with temporal_calls(temporal.where):
            async for event in handle.fetch_history_events(page_size=1, rpc_timeout=RPC_TIMEOUT):
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                if not payloads:
                    return None
                try:
                    return _request_configs(json.loads(payloads[0].data))
                except ValueError:
                    return None
    except RPCError as error:
        if error.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            return None
        raise
    return None


def _request_configs(request: Any) -> list[Config] | None:
    """(namespace, path) of each config a rollout request as given names; None: not one."""
    if not isinstance(request, dict):
        return None
    namespace = request.get("namespace") or DEFAULT_NAMESPACE
    changes = request.get("changes")
    named = changes if isinstance(changes, list) else [request]
    configs: list[Config] = []
    for change in named:
        if not isinstance(change, dict) or not isinstance(change.get("path"), str):
            return None
        space = change.get("namespace") or namespace
        if not isinstance(space, str):
            return None
        configs.append((space, change["path"]))
    return configs
