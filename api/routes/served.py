"""`GET /v1/admin/configs`: what is served in some namespaces, read at once (every config the
store knows, with its stable version, schema digest and lock; the active freezes). Configs as code
(`tempoconf diff|apply DIR`) compare a directory with it in one call, not three per config."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.access.roles import Role
from tempoconf.api.answers import (
    FreezeAnswer,
    ServedConfigAnswer,
    ServedLockAnswer,
    ServedStateAnswer,
)
from tempoconf.api.auth import operator, require_role
from tempoconf.api.deps import state_of
from tempoconf.api.errors import ApiError
from tempoconf.api.routing import route
from tempoconf.operations.served import served_state
from tempoconf.paths import namespace_problem
from tempoconf.store.records import LockRecord, ServedConfig

__all__ = ["routes"]


def _namespaces(request: Request) -> list[str] | None:
    """The repeated `?namespace=`; None (every namespace) when there is none. ApiError(400) for
    an invalid one."""
    namespaces = request.query_params.getlist("namespace")
    for namespace in namespaces:
        problem = namespace_problem(namespace)
        if problem is not None:
            raise ApiError(400, f"invalid query parameter namespace: {problem}")
    return namespaces or None


async def served_configs(request: Request) -> JSONResponse:
    principal = await operator(request)
    namespaces = _namespaces(request)
    if namespaces is not None:
        require_role(request, principal, Role.VIEWER, namespaces)
    state = await served_state(state_of(request).store, namespaces)
    now = datetime.now(UTC)
    # Every namespace asked for: those the caller may view.
    answer = ServedStateAnswer(
        configs=[
            _config(config)
            for config in state.configs
            if principal.may(Role.VIEWER, config.namespace)
        ],
        freezes=[
            FreezeAnswer.of(freeze, now)
            for freeze in state.freezes
            if principal.may(Role.VIEWER, freeze.namespace)
        ],
    )
    return JSONResponse(answer.body())


def _config(config: ServedConfig) -> ServedConfigAnswer:
    return ServedConfigAnswer(
        namespace=config.namespace,
        path=config.path,
        stable_version=config.stable_version,
        schema_digest=config.schema_digest,
        lock=_lock(config.lock),
    )


def _lock(lock: LockRecord | None) -> ServedLockAnswer | None:
    if lock is None:
        return None
    return ServedLockAnswer(
        workflow_id=lock.workflow_id,
        run_id=lock.run_id,
        version=lock.version,
        acquired_at=lock.acquired_at.isoformat(),
    )


routes = [route("/v1/admin/configs", served_configs, methods=["GET"])]
