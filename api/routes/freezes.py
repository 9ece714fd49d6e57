"""`GET|POST /v1/admin/freezes`, `POST /v1/admin/freezes/{namespace}:end`: freezes of namespaces
(tempoconf.gates.freezes). While a namespace is frozen no rollout in it widens or promotes."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.access.roles import Role
from tempoconf.api.answers import FreezeAnswer
from tempoconf.api.auth import acting_identity, operator, require_role
from tempoconf.api.bodies import ADMIN_BODY_LIMIT, invalid, read_json, validate_body
from tempoconf.api.deps import limit_param, state_of
from tempoconf.api.errors import ApiError
from tempoconf.api.routing import route
from tempoconf.gates.freezes import parse_until
from tempoconf.operations import freezes as freezing
from tempoconf.paths import DEFAULT_NAMESPACE, namespace_problem
from tempoconf.problems import Problem
from tempoconf.rollout.spec_fields import Namespace
from tempoconf.storable import STORABLE

__all__ = [
    "DEFAULT_FREEZE_LIMIT",
    "FreezeAnswer",
    "FreezeEndAnswer",
    "FreezeEndBody",
    "FreezeStartBody",
    "FreezesAnswer",
    "routes",
]

logger = logging.getLogger(__name__)

DEFAULT_FREEZE_LIMIT = 50
MAX_FREEZE_LIMIT = 1000


class _Body(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )


class FreezeStartBody(_Body):
    namespace: Namespace = DEFAULT_NAMESPACE
    """The namespace to freeze."""
    reason: Annotated[str, Field(min_length=1, max_length=2000), STORABLE]
    """Why: every rollout the freeze holds says it."""
    until: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    """When the freeze ends by itself: ISO 8601 with an offset, or a duration from now (`2h`);
    in the future. None: when it is ended."""
    by: Annotated[str, Field(max_length=200), STORABLE] = ""


class FreezeEndBody(_Body):
    reason: Annotated[str, Field(max_length=2000), STORABLE] = ""
    by: Annotated[str, Field(max_length=200), STORABLE] = ""


class FreezeEndAnswer(FreezeAnswer):
    rollouts_told: int | None
    """How many rollouts waiting on a freeze were told to look again now; null: Temporal could
    not be asked (`not_told` says why). Any rollout not told looks again within 30 s."""
    not_told: str
    """Why the waiting rollouts could not be told; empty when they were."""


class FreezesAnswer(BaseModel):
    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    freezes: list[FreezeAnswer]
    """Newest first, active and ended."""


async def freezes(request: Request) -> JSONResponse:
    # One route for both methods, so a 405 lists both in its Allow header.
    principal = await operator(request)
    store = state_of(request).store
    if request.method == "GET":
        namespace = request.query_params.get("namespace")
        if namespace is not None and namespace_problem(namespace):
            raise ApiError(
                400, f"invalid query parameter namespace: {namespace_problem(namespace)}"
            )
        if namespace is not None:
            require_role(request, principal, Role.VIEWER, (namespace,))
        limit = limit_param(request, default=DEFAULT_FREEZE_LIMIT, maximum=MAX_FREEZE_LIMIT)
        listed = [
            freeze
            for freeze in await freezing.list_freezes(store, namespace, limit=limit)
            if principal.may(Role.VIEWER, freeze.namespace)  # every namespace: those it sees
        ]
        now = datetime.now(UTC)
        answer = FreezesAnswer(freezes=[FreezeAnswer.of(freeze, now) for freeze in listed])
        return JSONResponse(answer.model_dump(mode="json"))
    raw = await read_json(request, limit=ADMIN_BODY_LIMIT)
    by = acting_identity(principal, raw, what="freeze")
    body = validate_body(FreezeStartBody, raw, what="freeze")
    require_role(request, principal, Role.ADMIN, (body.namespace,))
    until = None
    if body.until is not None:
        try:
            until = parse_until(body.until, now=datetime.now(UTC))
        except ValueError as error:
            raise invalid("freeze", [Problem("/until", str(error))]) from None
    started = await freezing.start_freeze(
        store, body.namespace, reason=body.reason, by=by.name, until=until
    )
    return JSONResponse(
        FreezeAnswer.of(started, datetime.now(UTC)).model_dump(mode="json"), status_code=201
    )


async def end_freeze(request: Request) -> JSONResponse:
    principal = await operator(request)
    namespace = request.path_params["namespace"]
    problem = namespace_problem(namespace)
    if problem is not None:
        raise ApiError(400, f"invalid namespace in the URL: {problem}")
    require_role(request, principal, Role.ADMIN, (namespace,))
    raw = await read_json(request, limit=ADMIN_BODY_LIMIT, empty={})
    by = acting_identity(principal, raw, what="freeze end")
    body = validate_body(FreezeEndBody, raw, what="freeze end")
    app = state_of(request)
    ended = await freezing.end_freeze(
        app.store, app.temporal, namespace, by=by.name, reason=body.reason
    )
    if ended.rollouts_told is None:
        logger.warning(
            "ended the freeze of %s; could not tell the waiting rollouts: %s",
            namespace,
            ended.not_told,
        )
    answer = FreezeEndAnswer.model_validate(
        {
            **FreezeAnswer.of(ended.freeze, datetime.now(UTC)).model_dump(),
            "rollouts_told": ended.rollouts_told,
            "not_told": ended.not_told,
        }
    )
    return JSONResponse(answer.model_dump(mode="json"))


routes = [
    route("/v1/admin/freezes", freezes, methods=["GET", "POST"]),
    route("/v1/admin/freezes/{namespace}:end", end_freeze, methods=["POST"]),
]
