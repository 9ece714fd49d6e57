"""What routes need, read from the app's state (set once in `create_app`)."""

from __future__ import annotations

import re
from typing import Protocol

from starlette.requests import Request

from tempoconf.access.identity import Principal
from tempoconf.access.roles import Role
from tempoconf.api.auth import operator, require_role
from tempoconf.api.distribution import config_name_from
from tempoconf.api.errors import ApiError
from tempoconf.api.metrics import ApiMetrics
from tempoconf.api.snapshot_source import SnapshotSource
from tempoconf.api.temporal_client import TemporalConnector
from tempoconf.settings import Settings
from tempoconf.store.store import Store

__all__ = ["AppState", "authorized_config", "config_name", "limit_param", "state_of"]


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
