"""`tempoconf rollout start|status|halt|bypass|advance|pause|resume|approve`."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from tempoconf.canonical import version_id
from tempoconf.change import rollout_change, workflow_summary
from tempoconf.cli._common import (
    SUCCESSFUL_OUTCOMES,
    actor,
    connect_temporal,
    die,
    given_connection_flags,
    open_store,
    path_args,
    print_problems,
    read_json_file,
    settings_from_args,
    tempoconf_command,
    workflow_ui_url,
)
from tempoconf.cli.schema import check_config_name
from tempoconf.problems import InvalidRequestError, Problem
from tempoconf.request import RolloutRequest
from tempoconf.settings import Settings
from tempoconf.temporal import WORKFLOW_TYPE, rollout_workflow_id
from tempoconf.validation import validate_rollout

__all__ = [
    "request_change",
    "request_problems",
    "rollback_request",
    "rollback_command",
    "rollout_version",
    "start_command",
    "update_command",
]

RPC_TIMEOUT = timedelta(seconds=15)


# -- start -------------------------------------------------------------------------------------
def request_problems(raw: Any, store: Any) -> tuple[RolloutRequest | None, list[Problem]]:
    """Every problem of a raw request, exactly as the workflow's prepare step finds them
    (tempoconf.validation: its fields, and its value or the rollback's against the schema)."""
    try:
        return validate_rollout(raw, store).request, []
    except InvalidRequestError as error:
        return None, error.problems


def rollout_version(request: RolloutRequest) -> str:
    """The version a request rolls out: the rollback's, or the new value's id."""
    return request.version if request.version is not None else version_id(request.value)


def request_change(request: RolloutRequest, store: Any) -> str:
    """What a valid request changes against the config's stable version, as the workflow says it."""
    stable = store.get_stable(request.namespace, request.path)
    if request.version is None:
        return rollout_change(request.value, stable)
    existing = store.get_version(request.namespace, request.path, request.version)
    return rollout_change(
        None if existing is None else existing.value, stable, rollback_to=request.version
    )


def start_command(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    raw = read_json_file(args.file, what="rollout request")
    with open_store(settings) as store:
        request, problems = request_problems(raw, store)
        if problems or request is None:
            print_problems(problems, what=f"rollout request {args.file} refused")
            print("nothing was started.", file=sys.stderr)
            return 2
        lock = store.get_lock(request.namespace, request.path)
        change = request_change(request, store)
    return asyncio.run(
        _start(
            settings,
            raw,
            request,
            lock,
            change=change,
            workflow_id=args.workflow_id,
            wait=args.wait,
            flags=given_connection_flags(args),
        )
    )


DEFAULT_ROLLBACK_STAGES: list[dict[str, Any]] = [
    {"channel": "canary"},
    {"percentile": 10},
    {"percentile": 50},
]
DEFAULT_ROLLBACK_COOLDOWN = "5m"
# What --stages-from takes from a request file: who is reached, and for how long.
_STAGE_FIELDS = ("stages", "strategy", "default_cooldown_time", "default_expiration_time")


def rollback_request(args: argparse.Namespace) -> dict[str, Any]:
    """The request of `tempoconf rollback`: a rollout of an existing version, stage-less unless
    --staged (then canary → 10% → 50%, or the stages of --stages-from)."""
    raw: dict[str, Any] = {
        "path": args.path,
        "namespace": args.namespace,
        "version": args.version,
        "stages": [],
        "author": actor(),
        "message": args.reason or f"rollback to {args.version}",
    }
    if not args.staged:
        if args.stages_from or args.cooldown:
            die("--stages-from and --cooldown apply to a --staged rollback only", exit_code=2)
        return raw
    if args.stages_from:
        source = read_json_file(args.stages_from, what="request file")
        if not isinstance(source, dict) or not (source.get("stages") or source.get("strategy")):
            die(
                f"{args.stages_from} has no 'stages' (or 'strategy') to roll back through",
                exit_code=2,
            )
        raw.update({key: source[key] for key in _STAGE_FIELDS if key in source})
    else:
        raw["stages"] = [dict(stage) for stage in DEFAULT_ROLLBACK_STAGES]
    if args.cooldown or "default_cooldown_time" not in raw:
        raw["default_cooldown_time"] = args.cooldown or DEFAULT_ROLLBACK_COOLDOWN
    return raw


def rollback_command(args: argparse.Namespace) -> int:
    """Roll a config back to a version it had: at once, or through stages with --staged."""
    check_config_name(args.namespace, args.path)
    settings = settings_from_args(args)
    raw = rollback_request(args)
    with open_store(settings) as store:
        request, problems = request_problems(raw, store)
        if problems or request is None:
            print_problems(problems, what=f"rollback of {args.namespace}/{args.path} refused")
            print("nothing was started.", file=sys.stderr)
            return 2
        lock = store.get_lock(request.namespace, request.path)
        change = request_change(request, store)
    # An immediate rollback is quick, so it waits unless told not to; a staged one waits if asked.
    wait = args.wait or (not args.staged and not args.no_wait)
    return asyncio.run(
        _start(
            settings,
            raw,
            request,
            lock,
            change=change,
            workflow_id=None,
            wait=wait,
            flags=given_connection_flags(args),
        )
    )


async def _start(
    settings: Settings,
    raw: dict[str, Any],
    request: RolloutRequest,
    lock: Any,
    *,
    change: str,
    workflow_id: str | None,
    wait: bool,
    flags: str = "",
) -> int:
    client = await connect_temporal(settings)
    name = f"{request.namespace}/{request.path}"
    if lock is not None and await _is_running(client, lock.workflow_id, lock.run_id):
        die(
            f"{name} already has a running rollout: workflow {lock.workflow_id!r} (version {lock.version}).\n"
            f"See it with `{tempoconf_command()} rollout status {path_args(request.namespace, request.path)}`; "
            "halt or bypass it before starting another."
        )
    given_id = workflow_id
    workflow_id = given_id or rollout_workflow_id(request.namespace, request.path)
    version = rollout_version(request)
    stages = (
        " → ".join(stage.display_name for stage in request.all_stages) or "none: promote directly"
    )
    try:
        handle = await client.start_workflow(
            WORKFLOW_TYPE,
            raw,
            id=workflow_id,
            task_queue=settings.task_queue,
            static_summary=workflow_summary(request.namespace, request.path, version, change),
            static_details=_static_details(request, version, stages, change),
        )
    except WorkflowAlreadyStartedError:
        die(
            f"workflow {workflow_id!r} is already running: see `{tempoconf_command()} rollout status "
            f"{path_args(request.namespace, request.path)}`, or pass --id for another id."
        )
    print(f"started the rollout of {name} to version {version}")
    print(f"  stages       {stages}")
    print(f"  workflow id  {workflow_id}")
    print(f"  run id       {handle.result_run_id}")
    print(f"  Web UI       {workflow_ui_url(settings, workflow_id, handle.result_run_id)}")
    target = path_args(request.namespace, request.path) + (
        f" --id {shlex.quote(given_id)}" if given_id else ""
    )
    tempoconf = tempoconf_command()  # as the user can type it: a venv's bin is often not on PATH
    # `flags`: the connection flags this command was given, or the hints would go elsewhere
    if request.all_stages:
        print("next:")
        print(f"  {tempoconf} rollout status {target} --watch{flags}   follow it stage by stage")
        print(
            f"  {tempoconf} rollout halt {target} --reason '...'{flags}     revert every client to stable"
        )
        print(
            f"  {tempoconf} rollout bypass {target} --reason '...'{flags}   promote now, skipping holds and checks"
        )
    elif not wait:
        # No stages: it promotes as soon as it is prepared; there is nothing to halt or bypass.
        print("next:")
        print(f"  {tempoconf} rollout status {target}{flags}   its outcome")
    if not wait:
        return 0
    print("waiting for the result...", flush=True)
    return await _print_result(handle)


def _static_details(request: RolloutRequest, version: str, stages: str, change: str) -> str:
    lines = [
        f"**{request.namespace}/{request.path}** → version `{version}`",
        "",  # the Web UI renders the lines below as a list only after a blank line
        f"- change: {change}",
        f"- stages: {stages}",
    ]
    for label, text in (
        ("author", request.author),
        ("commit", request.commit),
        ("message", request.message),
    ):
        if text:
            lines.append(f"- {label}: {text}")
    return "\n".join(lines)[:20000]


async def _print_result(handle: WorkflowHandle[Any, Any]) -> int:
    try:
        result = await handle.result()
    except WorkflowFailureError as error:
        print(f"the rollout failed: {_failure_message(error)}")
        return 1
    outcome = str(result.get("outcome"))
    print(f"outcome: {outcome}")
    print(f"version: {result.get('version')}")
    if result.get("reason"):
        print(f"reason:  {result.get('reason')}")
    if outcome not in SUCCESSFUL_OUTCOMES:
        stable = result.get("stable_version")
        print(f"stable:  {stable or 'none: the config has no stable version, clients get 404'}")
    return 0 if outcome in SUCCESSFUL_OUTCOMES else 1


def _failure_message(error: BaseException) -> str:
    cause: BaseException | None = error
    while (
        cause is not None
        and cause.__cause__ is not None
        and not isinstance(cause, ApplicationError)
    ):
        cause = cause.__cause__
    return str(cause.message if isinstance(cause, ApplicationError) else cause)


async def _is_running(client: Client, workflow_id: str, run_id: str | None) -> bool:
    try:
        description = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return description.status == WorkflowExecutionStatus.RUNNING


# -- status and updates -----------------------------------------------------------------------
def _workflow_id(args: argparse.Namespace, settings: Settings) -> str:
    """The explicit --id, else the lock holder's workflow, else the CLI's default id."""
    if args.workflow_id:
        return str(args.workflow_id)
    with open_store(settings) as store:
        lock = store.get_lock(args.namespace, args.path)
    return lock.workflow_id if lock is not None else rollout_workflow_id(args.namespace, args.path)


def update_command(args: argparse.Namespace) -> int:
    check_config_name(args.namespace, args.path)
    settings = settings_from_args(args)
    workflow_id = _workflow_id(args, settings)
    return asyncio.run(_update(settings, args, workflow_id))


async def _update(settings: Settings, args: argparse.Namespace, workflow_id: str) -> int:
    client = await connect_temporal(settings)
    handle = client.get_workflow_handle(workflow_id)
    name = args.update_name
    try:
        result = await handle.execute_update(
            name, {"reason": getattr(args, "reason", ""), "by": actor()}, rpc_timeout=RPC_TIMEOUT
        )
    except WorkflowUpdateFailedError as error:
        print(f"{name} refused by the rollout {workflow_id!r}: {_failure_message(error)}")
        return 1
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            die(f"no running rollout of {args.namespace}/{args.path} (workflow id {workflow_id!r})")
        die(f"{name} could not be delivered to {workflow_id!r}: {error.message}")
    return _print_command_result(name, workflow_id, result)


def _print_command_result(name: str, workflow_id: str, result: dict[str, Any]) -> int:
    """The update's short answer: what the command did, then the state it left the rollout in."""
    verdict = "accepted" if result.get("accepted") else "changed nothing"
    print(f"{name}: {verdict} by {workflow_id}: {result.get('message')}")
    print(f"  state   {result.get('state')}: {result.get('phase')}")
    if result.get("stage"):
        print(
            f"  stage   {result.get('stage_number')}/{result.get('stage_count')} {result.get('stage')}"
        )
    return 0 if result.get("accepted") else 1
