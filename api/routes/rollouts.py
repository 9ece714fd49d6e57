"""Rollouts through Temporal: `POST /v1/admin/rollouts` starts one, `POST /v1/admin/plans` says
what one would do (starting nothing), `GET /v1/admin/rollouts/{path}` shows the current one as
`tempoconf rollout status` does, `POST /v1/admin/rollouts/{path}:{command}` sends halt, bypass,
advance, pause, resume or approve as an update: each a transport over tempoconf.operations."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from tempoconf.access.identity import Principal
from tempoconf.access.roles import Role
from tempoconf.api.answers import (
    ChangeAnswer,
    LockAnswer,
    PlanContextAnswer,
    RolloutAnswer,
    RolloutContextAnswer,
    RolloutStarted,
    RolloutStateAnswer,
    StableAnswer,
    WorkflowAnswer,
)
from tempoconf.api.auth import acting_identity, operator, require_role
from tempoconf.api.bodies import (
    ADMIN_BODY_LIMIT,
    ROLLOUT_BODY_LIMIT,
    invalid,
    read_json,
    validate_body,
)
from tempoconf.api.command_signing import command_signer, with_approval_key
from tempoconf.api.deps import authorized_rollout, denied, state_of, workflow_id_param
from tempoconf.api.routing import CONFIG_PATH, ROLLOUT_PATH, Endpoint, route
from tempoconf.operations import start as starting
from tempoconf.operations.errors import Invalid
from tempoconf.operations.preview import RolloutPreview
from tempoconf.operations.state import RolloutState, read_rollout_state
from tempoconf.operations.steer import OperatorCommandInput, steer_rollout
from tempoconf.problems import InvalidRequestError
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.commands import COMMAND_NAMES, CommandName, OperatorCommand
from tempoconf.rollout.digest import plan_digest
from tempoconf.rollout.plan import plan_from_request
from tempoconf.store.records import LockRecord, RolloutRecord

__all__ = ["routes", "stable_answer"]


# -- start --------------------------------------------------------------------------------------
async def start_rollout(request: Request) -> JSONResponse:
    principal = await operator(request)
    explicit = workflow_id_param(request)
    raw, preview = await _planned(request, principal)
    try:
        # Only an id the request's own configs determine: never another config's (team's).
        workflow_id = starting.started_workflow_id(preview, explicit)
    except Invalid as error:
        raise denied(request, principal, error, "workflow_id") from None
    started = await starting.start_rollout(
        state_of(request).temporal,
        raw,
        preview,
        task_queue=state_of(request).settings.task_queue,
        workflow_id=workflow_id,
    )
    parsed = preview.request
    answer = RolloutStarted(
        namespace=parsed.namespace,
        path=parsed.path,
        version=preview.version,
        stages=[stage.display_name for stage in parsed.all_stages],
        workflow_id=started.workflow_id,
        run_id=started.run_id,
    )
    return JSONResponse(answer.body(), status_code=202)


async def _planned(request: Request, principal: Principal) -> tuple[Any, RolloutPreview]:
    """The body (a start hands it to the workflow) and its preview, validated exactly as the
    workflow's prepare step validates it; 400 with every problem; 403 unless the caller is an
    operator in every namespace it touches (a changeset's several), and an admin there when it
    overrides freezes (`override_freeze`: checked now, as the request is made). A verified
    caller is the request's `started_by` (a body naming another: 403); four eyes forbid it as
    they forbid the `author` the body names. It is no part of the plan's digest, so a plan reviewed by one
    identity and started by another keeps its digest."""
    raw = await read_json(request, limit=ROLLOUT_BODY_LIMIT)
    starter = acting_identity(principal, raw, field="started_by", what="start")
    if starter.verified and isinstance(raw, dict):
        raw = {**raw, "started_by": starter.name}
    raw = with_approval_key(request, raw)
    try:
        preview = await starting.plan_rollout(state_of(request).store, raw)
    except InvalidRequestError as error:
        raise invalid("rollout request", error.problems) from None
    parsed = preview.request
    touched = [
        parsed.namespace,
        *(parsed.change_namespace(change) for change in parsed.changes or ()),
    ]
    require_role(request, principal, Role.OPERATOR, touched)
    if parsed.override_freeze is not None:
        # Passing a freeze overrules whoever froze the namespace: the freezer's role, everywhere.
        require_role(request, principal, Role.ADMIN, touched)
    return raw, preview


# -- plan ---------------------------------------------------------------------------------------
async def plan_rollout(request: Request) -> JSONResponse:
    """What a request would do, validated exactly as a start: its version, the value, the stable
    and the change against it, the lock. Nothing is stored or started."""
    _, preview = await _planned(request, await operator(request))
    namespace, path = preview.request.namespace, preview.request.path
    answer = PlanContextAnswer(
        namespace=namespace,
        path=path,
        version=preview.version,
        rollback=preview.request.version is not None,
        version_exists=preview.version_exists,
        value=preview.value,
        stable=stable_answer(namespace, path, preview.stable),
        lock=_lock(preview.lock),
        change=preview.change,
        changes=[ChangeAnswer.model_validate(asdict(change)) for change in preview.changes],
        digest=plan_digest(plan_from_request(preview.request, preview.version)),
    )
    return JSONResponse(answer.body())


def stable_answer(namespace: str, path: str, record: VersionRecord | None) -> StableAnswer | None:
    if record is None:
        return None
    return StableAnswer(
        namespace=namespace,
        path=path,
        version=record.version,
        value=record.value,
        author=record.author,
        commit=record.commit,
        message=record.message,
        created_at=record.created_at.isoformat() if record.created_at else None,
    )


# -- state --------------------------------------------------------------------------------------
async def rollout_state(request: Request) -> JSONResponse:
    _, namespace, path, target = await authorized_rollout(request, Role.VIEWER, running=False)
    app = state_of(request)
    state = await read_rollout_state(
        lambda: app.store, app.temporal, namespace, path, target.workflow_id
    )
    answer = RolloutStateAnswer(
        namespace=namespace,
        path=path,
        rollout=_rollout(state.rollout),
        lock=_lock(state.lock),
        workflow=_workflow(state),
        context=_context(state),
    )
    return JSONResponse(answer.body())


def _workflow(state: RolloutState) -> WorkflowAnswer:
    """What Temporal says of the workflow (read as `rollout status` reads it); `error` and
    `error_kind` say why not when it cannot."""
    snapshot, unreadable = state.snapshot, state.unreadable
    if snapshot is None:
        assert unreadable is not None
        return WorkflowAnswer(
            workflow_id=state.workflow_id,
            error=unreadable.message,
            error_kind=unreadable.kind,
            error_detail=unreadable.detail,
        )
    return WorkflowAnswer(
        workflow_id=state.workflow_id,
        run_id=snapshot.run_id,
        execution_status=snapshot.execution.upper(),
        status=snapshot.progress,
        outcome=snapshot.outcome,
        result=snapshot.result,
        reason=snapshot.reason,
        starter=snapshot.starter,
    )


def _context(state: RolloutState) -> RolloutContextAnswer | None:
    found = state.context
    if found is None:
        return None
    return RolloutContextAnswer(
        started_by=found.started_by,
        started_at=found.started_at.isoformat() if found.started_at else None,
        start_reason=found.start_reason,
        author=found.author,
        commit=found.commit,
        message=found.message,
        stable=found.stable,
    )


# -- operator commands (tempoconf.rollout.commands), sent as updates -------------------------------
def _command_endpoint(name: str) -> Endpoint:
    async def endpoint(request: Request) -> JSONResponse:
        return await _send(request, name)

    endpoint.__name__ = f"{name}_rollout"
    return endpoint


async def _send(request: Request, name: str) -> JSONResponse:
    # Approving is the approver's; every other command the operator's (halt included).
    role = Role.APPROVER if name == CommandName.APPROVE else Role.OPERATOR
    principal, namespace, path, target = await authorized_rollout(request, role, running=True)
    raw = await read_json(request, limit=ADMIN_BODY_LIMIT, empty={})
    by = acting_identity(principal, raw, what=name)
    signer = command_signer(request, raw, what=name)
    command = validate_body(OperatorCommand, raw, what=f"{name} request")
    store = state_of(request).store
    sent = await steer_rollout(
        lambda: store,
        state_of(request).temporal,
        OperatorCommandInput(
            namespace=namespace,
            path=path,
            name=name,
            reason=command.reason,
            by=by.name,
            digest=command.digest,
            workflow_id=target.workflow_id,
        ),
        signer=signer,
    )
    # The workflow's short CommandResult (the full progress stays GET /v1/admin/rollouts/{path}),
    # passed on as it comes: api.answers.CommandAnswer documents it.
    return JSONResponse({"workflow_id": sent.workflow_id, **sent.result})


# -- helpers ------------------------------------------------------------------------------------
def _rollout(record: RolloutRecord | None) -> RolloutAnswer | None:
    if record is None:
        return None
    values = asdict(record)
    values["started_at"] = record.started_at.isoformat()
    values["updated_at"] = record.updated_at.isoformat()
    return RolloutAnswer.model_validate(values)


def _lock(record: LockRecord | None) -> LockAnswer | None:
    if record is None:
        return None
    values = asdict(record)
    values["acquired_at"] = record.acquired_at.isoformat()
    return LockAnswer.model_validate(values)


routes = [
    route("/v1/admin/rollouts", start_rollout, methods=["POST"]),
    route("/v1/admin/plans", plan_rollout, methods=["POST"]),
    *(
        route(f"/v1/admin/rollouts/{CONFIG_PATH}:{name}", _command_endpoint(name), methods=["POST"])
        for name in COMMAND_NAMES
    ),
    # ROLLOUT_PATH: `GET .../x:halt` is a 405 (POST it), not a 400 for a path with a ':'.
    route(f"/v1/admin/rollouts/{ROLLOUT_PATH}", rollout_state, methods=["GET"]),
]
