"""Rollouts through Temporal: `POST /v1/admin/rollouts` starts one, `POST /v1/admin/plans` says
what one would do (starting nothing), `GET /v1/admin/rollouts/{path}` shows the current one as
`tempoconf rollout status` does, `POST /v1/admin/rollouts/{path}/{signal}` sends halt, bypass,
advance, pause, resume or approve as an update."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

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
from tempoconf.api.auth import require_admin
from tempoconf.api.bodies import ADMIN_BODY_LIMIT, invalid, read_json, validate_body
from tempoconf.api.deps import config_name, settings_of, store_of, temporal_of
from tempoconf.api.errors import ApiError
from tempoconf.api.routing import CONFIG_PATH, ROLLOUT_PATH, Endpoint, route
from tempoconf.api.temporal_client import rpc_errors, temporal_unavailable
from tempoconf.operations.preview import preview_rollout
from tempoconf.operations.view import (
    RolloutSnapshot,
    SnapshotUnavailable,
    find_workflow_id,
    read_snapshot,
    store_context,
)
from tempoconf.problems import InvalidRequestError
from tempoconf.resolution import VersionRecord
from tempoconf.rollout.commands import COMMAND_NAMES, OperatorCommand, command_path
from tempoconf.rollout.digest import plan_digest
from tempoconf.rollout.plan import plan_from_request
from tempoconf.rollout.validation import ValidatedRollout, validate_rollout
from tempoconf.storable import text_problem
from tempoconf.store.records import LockRecord, RolloutRecord
from tempoconf.store.store import Store
from tempoconf.temporal.names import WORKFLOW_TYPE, request_workflow_id, rollout_workflow_id

__all__ = ["RPC_TIMEOUT", "routes", "stable_answer"]

RPC_TIMEOUT = timedelta(seconds=15)
_MAX_WORKFLOW_ID = 1000


# -- start --------------------------------------------------------------------------------------
async def start_rollout(request: Request) -> JSONResponse:
    require_admin(request)
    workflow_id = _workflow_id_param(request)
    raw, validated = await _validated_request(request)
    store = store_of(request)
    parsed = validated.request
    namespace, path = parsed.namespace, parsed.path
    workflow_id = workflow_id or request_workflow_id(parsed)
    connector = temporal_of(request)
    client = await connector.client()
    preview = await asyncio.to_thread(preview_rollout, validated, store)
    lock = preview.lock
    if lock is not None and await _is_running(
        client, lock.workflow_id, lock.run_id, connector.where
    ):
        raise ApiError(
            409,
            f"config {path!r} in namespace {namespace!r} already has a running rollout: "
            f"workflow {lock.workflow_id!r} (run {lock.run_id}) of version {lock.version}; "
            "halt or bypass it first",
        )
    version = validated.version
    stages = [stage.display_name for stage in parsed.all_stages]
    try:
        with rpc_errors(connector.where):
            handle = await client.start_workflow(
                WORKFLOW_TYPE,
                raw,
                id=workflow_id,
                task_queue=settings_of(request).task_queue,
                static_summary=preview.summary(),
                static_details=preview.details(),
                rpc_timeout=RPC_TIMEOUT,
            )
    except WorkflowAlreadyStartedError:
        raise ApiError(409, f"workflow {workflow_id!r} is already running") from None
    started = RolloutStarted(
        namespace=namespace,
        path=path,
        version=version,
        stages=stages,
        workflow_id=workflow_id,
        run_id=handle.result_run_id,
    )
    return JSONResponse(started.body(), status_code=202)


async def _validated_request(request: Request) -> tuple[Any, ValidatedRollout]:
    """The body as sent (a start hands it to the workflow as is) and its validation, exactly as
    the workflow's prepare step validates it; 400 with every problem."""
    raw = await read_json(request, limit=ADMIN_BODY_LIMIT)
    try:
        validated = await asyncio.to_thread(validate_rollout, raw, store_of(request))
    except InvalidRequestError as error:
        raise invalid("rollout request", error.problems) from None
    return raw, validated


# -- plan ---------------------------------------------------------------------------------------
async def plan_rollout(request: Request) -> JSONResponse:
    """What a request would do, validated exactly as a start: its version, the value, the stable
    and the change against it, the lock. Nothing is stored or started."""
    require_admin(request)
    _, validated = await _validated_request(request)
    answer = await asyncio.to_thread(_plan_context, store_of(request), validated)
    return JSONResponse(answer.body())


def _plan_context(store: Store, validated: ValidatedRollout) -> PlanContextAnswer:
    preview = preview_rollout(validated, store)
    namespace, path = preview.request.namespace, preview.request.path
    return PlanContextAnswer(
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


async def _is_running(client: Client, workflow_id: str, run_id: str | None, where: str) -> bool:
    """Whether the lock's holder still runs. A rollout holds the lock under its first run's id for
    its whole life: a run that continued as new runs on as a later run of its chain (as the
    prepare activity judges it, so a start it would refuse is refused here, 409, not started)."""
    try:
        with rpc_errors(where):
            description = await client.get_workflow_handle(workflow_id, run_id=run_id).describe(
                rpc_timeout=RPC_TIMEOUT
            )
            if description.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
                return description.status == WorkflowExecutionStatus.RUNNING
            latest = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=RPC_TIMEOUT)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    chain = latest.raw_description.workflow_execution_info.first_run_id
    return latest.status == WorkflowExecutionStatus.RUNNING and chain == run_id


# -- state --------------------------------------------------------------------------------------
async def rollout_state(request: Request) -> JSONResponse:
    require_admin(request)
    namespace, path = config_name(request)
    store = store_of(request)
    explicit = _workflow_id_param(request)
    lock, rollout, workflow_id = await asyncio.to_thread(
        _lock_rollout_and_target, store, namespace, path, explicit
    )
    workflow, snapshot = await _workflow_state(request, workflow_id)
    context = None
    if snapshot is not None:
        version = (snapshot.progress or {}).get("version") or snapshot.result_version
        found = await asyncio.to_thread(
            store_context, store, namespace, path, workflow_id, snapshot.run_id, version
        )
        context = RolloutContextAnswer(
            started_by=found.started_by,
            started_at=found.started_at.isoformat() if found.started_at else None,
            start_reason=found.start_reason,
            author=found.author,
            commit=found.commit,
            message=found.message,
            stable=found.stable,
        )
    answer = RolloutStateAnswer(
        namespace=namespace,
        path=path,
        rollout=_rollout(rollout),
        lock=_lock(lock),
        workflow=workflow,
        context=context,
    )
    return JSONResponse(answer.body())


def _lock_rollout_and_target(
    store: Store, namespace: str, path: str, explicit: str | None
) -> tuple[LockRecord | None, RolloutRecord | None, str]:
    """The lock, the active rollout, and the workflow `rollout status` would show (find_workflow_id)."""
    return (
        store.get_lock(namespace, path),
        store.get_rollout(namespace, path),
        find_workflow_id(store, namespace, path, explicit),
    )


def _lock_and_rollout(
    store: Store, namespace: str, path: str
) -> tuple[LockRecord | None, RolloutRecord | None]:
    return store.get_lock(namespace, path), store.get_rollout(namespace, path)


async def _workflow_state(
    request: Request, workflow_id: str
) -> tuple[WorkflowAnswer, RolloutSnapshot | None]:
    """What Temporal says of the workflow (read as `rollout status` reads it); `error` and
    `error_kind` say why not when it cannot."""
    connector = temporal_of(request)
    try:
        client = await connector.client()
        snapshot = await read_snapshot(client, workflow_id)
    except ApiError as error:
        return WorkflowAnswer(
            workflow_id=workflow_id,
            error=error.message,
            error_kind="unavailable",
            error_detail=error.message,
        ), None
    except SnapshotUnavailable as error:
        cause = error.__cause__
        if error.kind == "not_found":
            message = f"no workflow {workflow_id!r} in {connector.where}"
        elif isinstance(cause, RPCError) and temporal_unavailable(cause):
            message = f"{connector.where} did not answer (is a worker running?): {error.detail}"
        elif error.kind == "query_failed":
            message = f"the workflow could not answer `status`: {error.detail}"
        else:
            message = f"{connector.where}: {error.detail}"
        return WorkflowAnswer(
            workflow_id=workflow_id,
            error=message,
            error_kind=error.kind,
            error_detail=error.detail,
        ), None
    answer = WorkflowAnswer(
        workflow_id=workflow_id,
        run_id=snapshot.run_id,
        execution_status=snapshot.execution.upper(),
        status=snapshot.progress,
        outcome=snapshot.outcome,
        result=snapshot.result,
        reason=snapshot.reason,
        starter=snapshot.starter,
    )
    return answer, snapshot


# -- operator commands (tempoconf.rollout.commands), sent as updates ----------------------------------------------------------
def _signal_endpoint(name: str) -> Endpoint:
    async def endpoint(request: Request) -> JSONResponse:
        return await _send(request, name)

    endpoint.__name__ = f"{name}_rollout"
    return endpoint


def _deprecated_signal_endpoint(name: str) -> Endpoint:
    """The `/{path}/{name}` form: answered as the canonical one, marked deprecated (RFC 9745's
    `Deprecation`, RFC 8594's `Link` to the successor)."""

    async def endpoint(request: Request) -> JSONResponse:
        response = await _send(request, name)
        response.headers["Deprecation"] = "true"
        successor = command_path(request.path_params["path"], name)
        response.headers["Link"] = f'<{successor}>; rel="successor-version"'
        return response

    endpoint.__name__ = f"{name}_rollout_deprecated"
    return endpoint


async def _send(request: Request, name: str) -> JSONResponse:
    caller = require_admin(request)
    namespace, path = config_name(request)
    explicit = _workflow_id_param(request)
    raw = await read_json(request, limit=ADMIN_BODY_LIMIT, empty={})
    command = validate_body(OperatorCommand, raw, what=f"{name} request")
    if caller is not None and command.by and command.by != caller:
        # A named token is who acts (four eyes count identities): it cannot speak for another.
        raise ApiError(
            403,
            f"{name} refused: this admin token is {caller!r}, and the body's by {command.by!r} "
            "names someone else (leave `by` out: the API sets it from the token's name)",
        )
    store = store_of(request)
    lock, rollout = await asyncio.to_thread(_lock_and_rollout, store, namespace, path)
    workflow_id = explicit or _target_workflow(namespace, path, lock, rollout)
    connector = temporal_of(request)
    client = await connector.client()
    handle = client.get_workflow_handle(workflow_id)
    argument = {"reason": command.reason, "by": caller or command.by or "api"}
    if command.digest:
        argument["digest"] = command.digest  # only approve reads it (tempoconf.rollout.approvals)
    try:
        with rpc_errors(connector.where):
            result = await handle.execute_update(name, argument, rpc_timeout=RPC_TIMEOUT)
    except WorkflowUpdateFailedError as error:
        # The same words as `tempoconf rollout NAME` in direct mode, which prints them as they come.
        raise ApiError(
            409, f"{name} refused by the rollout {workflow_id!r}: {_failure(error)}"
        ) from None
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise ApiError(
                404, f"no running rollout of {namespace}/{path} (workflow id {workflow_id!r})"
            ) from None
        raise ApiError(
            502, f"{name} could not be delivered to {workflow_id!r}: {error.message}"
        ) from None
    # The workflow's short CommandResult (the full progress stays GET /v1/admin/rollouts/{path}),
    # passed on as it comes: api.answers.CommandAnswer documents it.
    return JSONResponse({"workflow_id": workflow_id, **result})


def _failure(error: BaseException) -> str:
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    return str(cause.message) if isinstance(cause, ApplicationError) else str(error)


# -- helpers ------------------------------------------------------------------------------------
def _workflow_id_param(request: Request) -> str | None:
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


def _target_workflow(
    namespace: str, path: str, lock: LockRecord | None, rollout: RolloutRecord | None
) -> str:
    """The lock holder's workflow, else the active rollout's, else the CLI's default id."""
    if lock is not None:
        return lock.workflow_id
    if rollout is not None:
        return rollout.workflow_id
    return rollout_workflow_id(namespace, path)


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
        route(f"/v1/admin/rollouts/{CONFIG_PATH}:{name}", _signal_endpoint(name), methods=["POST"])
        for name in COMMAND_NAMES
    ),
    *(
        route(
            f"/v1/admin/rollouts/{CONFIG_PATH}/{name}",
            _deprecated_signal_endpoint(name),
            methods=["POST"],
        )
        for name in COMMAND_NAMES
    ),
    # ROLLOUT_PATH: `GET .../x:halt` is a 405 (POST it), not a 400 for a path with a ':'.
    route(f"/v1/admin/rollouts/{ROLLOUT_PATH}", rollout_state, methods=["GET"]),
]
