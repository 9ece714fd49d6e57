"""What routes need, read from the app's state (set once in `create_app`)."""

from __future__ import annotations

import re
from typing import Protocol

from starlette.requests import Request

from tempoconf.access.identity import Principal
from tempoconf.access.roles import Role
from tempoconf.api.auth import access_of, operator, require_role, route_of
from tempoconf.api.distribution import config_name_from
from tempoconf.api.errors import ApiError, operation_error
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.temporal_client import TemporalConnector
from tempoconf.operations.errors import OperationError
from tempoconf.operations.targets import ForeignWorkflow, RolloutTarget, find_rollout
from tempoconf.settings import Settings
from tempoconf.storable import text_problem
from tempoconf.store.store import Store

__all__ = [
    "AppState",
    "authorized_config",
    "authorized_rollout",
    "config_name",
    "denied",
    "limit_param",
    "state_of",
    "workflow_id_param",
]

_MAX_WORKFLOW_ID = 1000


class AppState(Protocol):
    """What `create_app` sets on the app's state (api/app.py), typed for the routes."""

    snapshot_cache: SnapshotSource
    store: Store
    settings: Settings
    metrics: ApiMetrics
    temporal: TemporalConnector


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state
    return state


def config_name(request: Request) -> tuple[str, str]:
    """(namespace, path) from `{path}` and `?namespace=`; ApiError(400) when either is invalid."""
    return config_name_from(request.path_params["path"], request.query_params)


async def authorized_config(request: Request, role: Role) -> tuple[Principal, str, str]:
    """Who calls, and the (namespace, path) they hold `role` in: 401 before a bad name's 400,
    which comes before a 403."""
    principal = await operator(request)
    namespace, path = config_name(request)
    require_role(request, principal, role, (namespace,))
    return principal, namespace, path


async def authorized_rollout(
    request: Request, role: Role, *, running: bool
) -> tuple[Principal, str, str, RolloutTarget]:
    """Who calls, the config named, and the rollout they act on, once they are known to hold
    `role` in every namespace that rollout touches (a changeset's every one), found from the
    rollout itself (tempoconf.operations.targets), never from a parameter beside it. The named
    config's namespace is judged first, so that a caller with no role there learns nothing of
    its rollouts. A `?workflow_id=` that is no rollout of the named config: 404, counted and
    logged as a refusal, in words that never tell whether it is another config's rollout.
    `running`: a command (the lock holder, else the active rollout, else the default id); else
    a read (the newest in the audit log too)."""
    principal, namespace, path = await authorized_config(request, role)
    explicit = workflow_id_param(request)
    app = state_of(request)
    try:
        target = await find_rollout(
            lambda: app.store, app.temporal, namespace, path, explicit, running=running
        )
    except ForeignWorkflow as error:
        raise denied(request, principal, error, "workflow_id") from None
    require_role(request, principal, role, target.namespaces)
    return principal, namespace, path, target


def denied(request: Request, principal: Principal, error: OperationError, reason: str) -> ApiError:
    """An operation's refusal of what the caller named (a workflow id), answered with its
    error's status and counted and logged as every refusal of access is."""
    status = operation_error(error).status
    return access_of(request).denials.deny(
        status, route_of(request), reason, principal.name, error.message
    )


def workflow_id_param(request: Request) -> str | None:
    """`?workflow_id=`: 1-1000 characters of text the store can keep; ApiError(400) else."""
    raw = request.query_params.get("workflow_id")
    if raw is None:
        return None
    if not 1 <= len(raw) <= _MAX_WORKFLOW_ID:
        raise ApiError(
            400, f"invalid query parameter workflow_id: 1-{_MAX_WORKFLOW_ID} characters expected"
        )
    # The rollout writes its id into its lock and audit rows: text the store must keep.
    problem = text_problem(raw)
    if problem is not None:
        raise ApiError(400, f"invalid query parameter workflow_id: {problem}")
    return raw


# ASCII digits only: str.isdigit() and int() also take other scripts' digits ('٣'), and
# isdigit() takes superscripts ('²') that int() then refuses.
_LIMIT = re.compile(r"[0-9]{1,9}")


def limit_param(request: Request, *, default: int, maximum: int) -> int:
    """`?limit=`: an integer from 1 to `maximum`, `default` when absent; ApiError(400) else."""
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    if not _LIMIT.fullmatch(raw) or not 1 <= int(raw) <= maximum:
        raise ApiError(
            400,
            f"invalid query parameter limit={raw[:40]!r}: expected an integer from 1 to {maximum}",
        )
    return int(raw)
