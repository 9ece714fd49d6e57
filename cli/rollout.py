"""`tempoconf rollout start|status|halt|bypass|advance|pause|resume|approve`."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from datetime import UTC, datetime
from typing import Any

from tempoconf.canonical import version_id
from tempoconf.cli._backend import (
    AlreadyRunning,
    CommandRefused,
    LockBusy,
    OperatorBackend,
    OperatorCommandInput,
    Prepared,
    api_mode,
    operator_backend,
)
from tempoconf.cli._common import (
    SUCCESSFUL_OUTCOMES,
    CommandError,
    actor,
    die,
    given_connection_flags,
    path_args,
    print_problems,
    read_json_file,
    settings_from_args,
    tempoconf_command,
    workflow_ui_url,
)
from tempoconf.cli.schema import check_config_name
from tempoconf.gates.freezes import describe_freeze
from tempoconf.gates.windows import next_opening, window_from_spec
from tempoconf.problems import InvalidRequestError
from tempoconf.rollout.details import time_left
from tempoconf.rollout.request import RolloutRequest
from tempoconf.rollout.signatures import API_ONLY
from tempoconf.settings import Settings
from tempoconf.temporal.names import request_workflow_id

__all__ = [
    "rollback_request",
    "rollback_command",
    "rollout_version",
    "start_command",
    "update_command",
]


# -- start -------------------------------------------------------------------------------------
def rollout_version(request: RolloutRequest) -> str:
    """The version a request rolls out: the rollback's, or the new value's id."""
    if request.changes is not None:  # a changeset: its first config's
        first = request.changes[0]
        return first.version if first.version is not None else version_id(first.value)
    return request.version if request.version is not None else version_id(request.value)


def start_command(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    raw = read_json_file(args.file, what="rollout request")
    return asyncio.run(
        _start(
            settings,
            raw,
            refused=f"rollout request {args.file} refused",
            workflow_id=args.workflow_id,
            wait=bool(args.wait),
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
    # An immediate rollback is quick, so it waits unless told not to; a staged one waits if asked.
    wait = args.wait or (not args.staged and not args.no_wait)
    return asyncio.run(
        _start(
            settings,
            raw,
            refused=f"rollback of {args.namespace}/{args.path} refused",
            workflow_id=None,
            wait=wait,
            flags=given_connection_flags(args),
        )
    )


async def _start(
    settings: Settings,
    raw: dict[str, Any],
    *,
    refused: str,
    workflow_id: str | None,
    wait: bool,
    flags: str = "",
) -> int:
    async with operator_backend(settings) as backend:
        try:
            prepared = await backend.prepare(raw)
        except InvalidRequestError as error:
            print_problems(error.problems, what=refused)
            print("nothing was started.", file=sys.stderr)
            return 2
        return await _start_prepared(
            backend,
            settings,
            raw,
            prepared,
            workflow_id=workflow_id,
            wait=wait,
            flags=flags,
        )


async def _start_prepared(
    backend: OperatorBackend,
    settings: Settings,
    raw: dict[str, Any],
    prepared: Prepared,
    *,
    workflow_id: str | None,
    wait: bool,
    flags: str,
) -> int:
    request = prepared.request
    name = f"{request.namespace}/{request.path}"
    if prepared.changes:
        name = "changeset " + ", ".join(f"{c.namespace}/{c.path}" for c in prepared.changes)
    given_id = workflow_id
    workflow_id = given_id or request_workflow_id(request)
    version = prepared.version
    stages = (
        " → ".join(stage.display_name for stage in request.all_stages) or "none: promote directly"
    )
    try:
        run_id = await backend.start(raw, prepared, workflow_id)
    except LockBusy as busy:
        lock = busy.lock
        die(
            f"{name} already has a running rollout: workflow {lock.workflow_id!r} (version {lock.version}).\n"
            f"See it with `{tempoconf_command()} rollout status {path_args(request.namespace, request.path)}`; "
            "halt or bypass it before starting another."
        )
    except AlreadyRunning:
        die(
            f"workflow {workflow_id!r} is already running: see `{tempoconf_command()} rollout status "
            f"{path_args(request.namespace, request.path)}`, or pass --id for another id."
        )
    what = f"{name} to version {version}"
    if prepared.changes:  # each config and its own version
        what = f"changeset of {len(prepared.changes)} configs: " + ", ".join(
            f"{c.namespace}/{c.path} to version {c.version}" for c in prepared.changes
        )
    print(f"started the rollout of {what}")
    print(f"  stages       {stages}")
    print(f"  workflow id  {workflow_id}")
    print(f"  run id       {run_id}")
    print(f"  Web UI       {workflow_ui_url(settings, workflow_id, run_id)}")
    for line in await _start_waits(backend, prepared):
        print(line)
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
    ending = await backend.wait_result(request.namespace, request.path, workflow_id, run_id)
    return _print_result(ending.result, ending.failure)


async def _start_waits(backend: OperatorBackend, prepared: Prepared) -> list[str]:
    """What a rollout just started waits for before any client gets its version, as the workflow
    will find it (workflows/rollout/_gates.py, pass_gates): its change windows closed now, a freeze of
    one of its namespaces (or that it passes one: `override_freeze`, a rollback). Best effort: a
    freeze that cannot be read now is left unsaid (the rollout's status says it once it waits)."""
    request = prepared.request
    lines = []
    now = datetime.now(UTC)
    opening = next_opening([window_from_spec(spec) for spec in request.windows], now)
    if opening is not None and opening.at > now:
        left = time_left((opening.at - now).total_seconds())
        lines.append(
            f"  waits        for its change window: no client gets the version before "
            f"{opening.label()} (in {left})"
        )
    # A changeset is held by a freeze of any of its configs' namespaces (and only those).
    configs = prepared.changes or [request]
    namespaces = dict.fromkeys(config.namespace for config in configs)
    passes = (
        f"override_freeze: {request.override_freeze.reason}"
        if request.override_freeze is not None
        else ("a rollback: freezes never hold one" if request.version is not None else "")
    )
    for namespace in namespaces:
        try:
            freezes = await backend.list_freezes(namespace, limit=1)
        except CommandError:
            continue
        for freeze in freezes:
            if not freeze.active(now):
                continue
            if passes:
                lines.append(f"  freeze       passed ({passes}): {describe_freeze(freeze)}")
            else:
                lines.append(
                    f"  waits        for the freeze to end: {describe_freeze(freeze)}; "
                    "no client gets the version until it ends"
                )
    return lines


def _print_result(result: dict[str, Any] | None, failure: str) -> int:
    if result is None:
        print(f"the rollout failed: {failure}")
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


# -- updates -----------------------------------------------------------------------------------
def update_command(args: argparse.Namespace) -> int:
    check_config_name(args.namespace, args.path)
    settings = settings_from_args(args)
    return asyncio.run(_update(settings, args))


async def _update(settings: Settings, args: argparse.Namespace) -> int:
    name = args.update_name
    command = OperatorCommandInput(
        namespace=args.namespace,
        path=args.path,
        name=name,
        reason=getattr(args, "reason", ""),
        digest=getattr(args, "digest", ""),
        workflow_id=args.workflow_id,
    )
    async with operator_backend(settings) as backend:
        try:
            sent = await backend.command(command)
        except CommandRefused as refusal:
            print(refusal)
            if API_ONLY in str(refusal) and not api_mode(settings):
                # Direct mode sends the approve to Temporal itself, unsigned: say how to sign it.
                print(
                    "  this tempoconf talks to Temporal directly and cannot sign: set "
                    "TEMPOCONF_API_URL (or --api-url) and TEMPOCONF_API_TOKEN (a token with the "
                    "approver role) to approve through the API"
                )
            return 1
    return _print_command_result(name, sent.workflow_id, sent.result)


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
