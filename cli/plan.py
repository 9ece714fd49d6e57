"""`tempoconf rollout plan FILE`: what a rollout request would do, with nothing published.

The request is checked exactly as `rollout start` checks it (`validate_rollout`); then the plan
shows the version it would create or reuse, the value's diff against stable, the expanded stages
and what each adds to the ones before it, and which known clients each stage would reach
(cumulative: a client is counted at the first stage that matches it, as the API resolves it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from tempoconf.cli._backend import Prepared, operator_backend
from tempoconf.cli._clients import KnownClient, clients_from_file
from tempoconf.cli._common import (
    die,
    given_connection_flags,
    print_problems,
    read_json_file,
    settings_from_args,
    tempoconf_command,
)
from tempoconf.cli._format import duration_text, table, value_diff
from tempoconf.durations import parse_duration
from tempoconf.gates.windows import ChangeWindow, is_open, next_opening
from tempoconf.operations.clients import ClientsQuery
from tempoconf.operations.preview import ChangePreview
from tempoconf.problems import InvalidRequestError
from tempoconf.resolution import ClientIdentity, stage_matches
from tempoconf.rollout.changesets import changeset_key, changeset_workflow_id
from tempoconf.rollout.details import time_left
from tempoconf.rollout.digest import plan_digest
from tempoconf.rollout.plan import PlannedStage, RolloutPlan, added_reach, plan_from_request

__all__ = ["StageReach", "plan_command", "stage_reach"]

CLIENTS_LISTED = 8
# Check fields worth showing in a one-line summary (the rest are tuning with defaults).
_CHECK_FIELDS = (
    "max_error_ratio",
    "min_clients",
    "max_baseline_factor",
    "query",
    "max",
    "min",
    "url",
)


@dataclass
class StageReach:
    """The known clients a stage would reach first, and how many stages 1..k reach together."""

    new: list[str] = field(default_factory=list)
    cumulative: int = 0


def stage_reach(
    path: str, stages: list[PlannedStage], clients: list[KnownClient]
) -> tuple[list[StageReach], list[str]]:
    """Per stage, the clients it reaches first (in order, as `resolve` picks stages); and the
    clients no stage reaches (they stay on stable)."""
    reach = [StageReach() for _ in stages]
    untouched: list[str] = []
    for client in clients:
        identity = ClientIdentity(client.client, client.channel, client.labels)
        first = next(
            (stage.index for stage in stages if stage_matches(stage, path, identity)), None
        )
        if first is None:
            untouched.append(client.client)
        else:
            reach[first].new.append(client.client)
    total = 0
    for item in reach:
        total += len(item.new)
        item.cumulative = total
    return reach, untouched


def _check_text(check: dict[str, Any]) -> str:
    fields = [f"{key}={check[key]}" for key in _CHECK_FIELDS if check.get(key) is not None]
    if check.get("interval"):
        fields.append(f"every {duration_text(float(check['interval']))}")
    return f"{check.get('kind')}({', '.join(fields)})"


def plan_command(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    raw = read_json_file(args.file, what="rollout request")
    try:
        since = parse_duration(args.since)
    except ValueError as error:
        die(f"--since: {error}", exit_code=2)
    listed = clients_from_file(args.clients_file) if args.clients_file else []
    try:
        prepared, reported = asyncio.run(_prepare(settings, raw, since))
    except InvalidRequestError as error:
        print_problems(error.problems, what=f"rollout request {args.file} refused")
        print("nothing was published.", file=sys.stderr)
        return 2
    request, version = prepared.request, prepared.version
    namespace, path = request.namespace, request.path
    value, stable, lock = prepared.value, prepared.stable, prepared.lock
    plan = plan_from_request(request, version)
    # A client listed in --clients wins over the same id seen in reports: the file knows its channel.
    by_id = {client.client: client for client in reported}
    by_id.update({client.client: client for client in listed})
    clients = sorted(by_id.values(), key=lambda client: client.client)
    # A changeset's percentile stages bucket by its key, not by a path (tempoconf.rollout.changesets).
    reach_key = (
        changeset_key((change.namespace, change.path) for change in prepared.changes)
        if prepared.changes
        else path
    )
    reach, untouched = stage_reach(reach_key, plan.stages, clients)
    explicit = len(request.stages)
    diff = value_diff(
        stable.value if stable else None,
        value,
        old_name=f"stable {stable.version}" if stable else "stable (none yet)",
        new_name=f"version {version}",
    )
    warnings = []
    if lock is not None:
        namespace, path = lock.namespace, lock.path  # a changeset's: the config held
        warnings.append(
            f"a rollout of {namespace}/{path} is running (workflow {lock.workflow_id!r}, version "
            f"{lock.version}): `rollout start` would be refused until it ends"
        )
    for name, its_version, its_stable in _configs(prepared):
        if its_stable == its_version:
            warnings.append(
                f"version {its_version} is already stable"
                + (f" for {name}" if prepared.changes else "")
                + ": the rollout would change no value"
                + (" of it" if prepared.changes else "")
            )
    facts = _PlanFacts(
        plan, request.version is not None, prepared.version_exists, stable, diff, reach, untouched,
        clients, len(reported), len(listed), explicit, warnings,
    )  # fmt: skip
    if args.json:
        print(
            json.dumps(
                _changeset_json(prepared) | _plan_json(facts),
                indent=2,
            )
        )
        return 0
    _print_plan(args, prepared, facts, since)
    return 0


def _configs(prepared: Prepared) -> list[tuple[str, str, str | None]]:
    """(namespace/path, version, stable version) of every config the request changes."""
    if prepared.changes:
        return [(f"{c.namespace}/{c.path}", c.version, c.stable_version) for c in prepared.changes]
    request, stable = prepared.request, prepared.stable
    return [
        (
            f"{request.namespace}/{request.path}",
            prepared.version,
            stable.version if stable else None,
        )
    ]


def _change_diff(change: ChangePreview) -> list[str]:
    """One config of a changeset: its value's diff against its stable."""
    return value_diff(
        change.stable_value if change.stable_version else None,
        change.value,
        old_name=f"stable {change.stable_version}"
        if change.stable_version
        else "stable (none yet)",
        new_name=f"version {change.version}",
    )


def _changeset_json(prepared: Prepared) -> dict[str, Any]:
    """`changeset`: a changeset's configs, workflow id and bucketing key (nothing for one config)."""
    if not prepared.changes:
        return {}
    configs = [(change.namespace, change.path) for change in prepared.changes]
    return {
        "changeset": {
            "workflow_id": changeset_workflow_id(configs),
            "bucket_key": changeset_key(configs),
            "changes": [
                {
                    "namespace": change.namespace,
                    "path": change.path,
                    "version": change.version,
                    "version_exists": change.version_exists,
                    "stable": change.stable_version,
                    "change": change.change,
                    "diff": "\n".join(_change_diff(change)),
                }
                for change in prepared.changes
            ],
        }
    }


def _print_header(
    args: argparse.Namespace, prepared: Prepared, plan: RolloutPlan, stored: bool, stable: Any
) -> None:
    """What the request rolls out: its config, version and stable, or every config of a changeset."""
    digest = f"  digest     {plan_digest(plan)}  (what `rollout approve --digest` names)"
    rollback = prepared.request.version is not None
    if not prepared.changes:
        print(f"plan of {args.file} for {plan.namespace}/{plan.path} (nothing was published)")
        print(f"  version    {plan.version}  ({_version_note(rollback, stored)})")
        print(digest)
        print(f"  stable     {stable.version if stable else 'none yet'}")
        return
    changes = prepared.changes
    configs = [(change.namespace, change.path) for change in changes]
    width = max(len(f"{c.namespace}/{c.path}") for c in changes)
    print(
        f"plan of {args.file} for a changeset of {len(changes)} configs, one stage ladder for "
        "all (nothing was published)"
    )
    for change in changes:
        its_rollback = any(
            c.path == change.path and prepared.request.change_namespace(c) == change.namespace
            and c.version is not None
            for c in prepared.request.changes or []
        )  # fmt: skip
        print(
            f"  config     {f'{change.namespace}/{change.path}':<{width}}  version {change.version}  "
            f"({_version_note(its_rollback, change.version_exists)}; stable "
            f"{change.stable_version or 'none yet'})"
        )
    print(digest)
    print(
        f"  workflow   {changeset_workflow_id(configs)}  (percentile cohorts by "
        f"bucket({changeset_key(configs)}, client))"
    )


async def _prepare(settings: Any, raw: Any, since: timedelta) -> tuple[Prepared, list[KnownClient]]:
    """The request checked (InvalidRequestError), what it would do, and the clients seen since."""
    async with operator_backend(settings) as backend:
        prepared = await backend.prepare(raw)
        request = prepared.request
        rows = await backend.client_rows(ClientsQuery(request.namespace, request.path, since))
    return prepared, [KnownClient(row.client, row.channel, dict(row.labels)) for row in rows]


def _version_note(rollback: bool, stored: bool) -> str:
    if rollback:
        return "an existing version (a rollback)"
    return "already stored: reused" if stored else "new: stored when the rollout starts"


class _PlanFacts(NamedTuple):
    """What `rollout plan` found, as its JSON and its text both show it."""

    plan: RolloutPlan
    rollback: bool
    stored: bool
    """The version is stored already."""
    stable: Any
    diff: list[str]
    reach: list[StageReach]
    untouched: list[str]
    clients: list[KnownClient]
    reported: int
    """How many clients were seen (polls or reports)."""
    listed: int
    """How many --clients listed."""
    explicit: int
    """How many stages the request names (the rest come from its strategy)."""
    warnings: list[str]


def _plan_json(facts: _PlanFacts) -> dict[str, Any]:
    (plan, rollback, stored, stable, diff, reach, untouched, clients, reported, listed, explicit,
     warnings) = facts  # fmt: skip
    return {
        "namespace": plan.namespace,
        "path": plan.path,
        "version": plan.version,
        "digest": plan_digest(plan),
        "version_exists": stored,
        "rollback": rollback,
        "stable": stable.version if stable else None,
        "diff": "\n".join(diff),
        "stages": [
            {
                "index": stage.index,
                "name": stage.name,
                "from_strategy": stage.index >= explicit,
                "cohort": stage.cohort(),
                "adds": added_reach(plan.stages, stage.index),
                "channel": stage.channel,
                "percentile": stage.percentile,
                "labels": stage.labels,
                "cooldown_seconds": stage.cooldown_seconds,
                "expiration_seconds": stage.expiration_seconds,
                "manual": stage.manual,
                "health": [check.spec for check in stage.health],
                "apply_gate": _apply_gate(stage),
                "new_clients": item.new,
                "clients": item.cumulative,
            }
            for stage, item in zip(plan.stages, reach, strict=True)
        ],
        "clients": {
            "known": len(clients),
            "reported": reported,
            "listed": listed,
            "stay_on_stable": untouched,
        },
        "webhooks": plan.webhooks,
        "windows": [window.describe() for window in plan.windows],
        "next_window_opening": _next_opening_iso(plan.windows),
        "override_freeze": plan.override_freeze,
        "warnings": warnings,
        "published": False,
    }


def _window_now(windows: list[ChangeWindow]) -> str:
    """Whether a rollout started now could widen at once, else when it first could."""
    now = datetime.now(UTC)
    if is_open(windows, now):
        return "open now: a stage started now is published at once"
    opening = next_opening(windows, now)
    assert opening is not None  # windows is not empty
    left = time_left((opening.at - now).total_seconds())
    return f"closed now: the first stage waits until {opening.label()} (in {left})"


def _next_opening_iso(windows: list[ChangeWindow]) -> str | None:
    """When a window next opens (now, if one is open); None without windows."""
    opening = next_opening(windows, datetime.now(UTC))
    return opening.at.isoformat() if opening is not None else None


def _apply_gate(stage: PlannedStage) -> dict[str, Any] | None:
    """A stage's gate on applied versions as the JSON plan shows it (None: it has none)."""
    if stage.min_applied is None:
        return None
    return {
        "min_applied": stage.min_applied,
        "applied_window_seconds": stage.applied_window_seconds,
        "apply_timeout_seconds": stage.apply_timeout_seconds,
        "on_apply_timeout": stage.on_apply_timeout,
    }


def describe_apply_gate(stage: PlannedStage) -> str:
    """E.g. `after its cooldown, waits until 95% of its cohort seen in the last 10m applied the
    version (apply timeout 10m, then revert)`."""
    timeout = (
        f"apply timeout {duration_text(stage.apply_timeout_seconds)}, then {stage.on_apply_timeout}"
        if stage.apply_timeout_seconds is not None
        else "no apply timeout"
    )
    return (
        f"after its cooldown, waits until {(stage.min_applied or 1) * 100:g}% of its cohort seen "
        f"in the last {duration_text(stage.applied_window_seconds)} applied the version ({timeout})"
    )


def _print_plan(
    args: argparse.Namespace, prepared: Prepared, facts: _PlanFacts, since: timedelta
) -> None:
    (plan, rollback, stored, stable, diff, reach, untouched, clients, reported, listed, explicit,
     warnings) = facts  # fmt: skip
    _print_header(args, prepared, plan, stored, stable)
    for label, text in (
        ("author", plan.author),
        ("commit", plan.commit),
        ("message", plan.message),
    ):
        if text:
            print(f"  {label:<10} {text}")
    for url in plan.webhooks:
        print(f"  webhook    {url}")
    if plan.windows:
        print(f"  windows    {', '.join(window.describe() for window in plan.windows)}")
        print(f"             {_window_now(plan.windows)}")
    if plan.override_freeze is not None:
        print(f"  freezes    passed: {plan.override_freeze}")
    for warning in warnings:
        print(f"  warning: {warning}")
    diffs = (
        [(f" of {c.namespace}/{c.path}", _change_diff(c)) for c in prepared.changes]
        if prepared.changes
        else [("", diff)]
    )
    for of, its_diff in diffs:
        print()
        if its_diff:
            print(f"value diff{of} against stable:")
            for line in its_diff:
                print(f"  {line}")
        else:
            print(f"value{of}: the same as stable (no diff)")
    print()
    count = len(plan.stages)
    if not count:
        print("stages: none: the version would be promoted to stable directly")
    else:
        strategy = f", {count - explicit} from the strategy" if count > explicit else ""
        print(
            f"stages ({count}{strategy}); each client is counted at the first stage that reaches it:"
        )
        total = len(clients)
        rows = []
        for stage, item in zip(plan.stages, reach, strict=True):
            share = f" ({item.cumulative / total:.0%})" if total else ""
            rows.append(
                [
                    stage.index + 1,
                    stage.name + (" *" if stage.index >= explicit else ""),
                    stage.cohort(),
                    added_reach(plan.stages, stage.index),
                    duration_text(stage.cooldown_seconds),
                    duration_text(stage.expiration_seconds),
                    "yes" if stage.manual else "-",
                    "; ".join(_check_text(check.spec) for check in stage.health) or "-",
                    f"+{len(item.new)}",
                    f"{item.cumulative}/{total}{share}",
                ]
            )
        headers = [
            "#",
            "STAGE",
            "COHORT",
            "ADDS",
            "COOLDOWN",
            "EXPIRES",
            "MANUAL",
            "CHECKS",
            "NEW",
            "CLIENTS",
        ]
        # CLIENTS last so the table stays aligned however long the checks are
        for line in table(headers, rows, indent="  "):
            print(line)
        if count > explicit:
            print("  * expanded from the request's strategy")
        for stage in plan.stages:
            if stage.min_applied is not None:
                print(f"  {stage.name}: {describe_apply_gate(stage)}")
    print()
    sources = [
        f"{reported} seen (polls or reports) in the last {duration_text(since.total_seconds())}"
    ]
    if args.clients_file:
        sources.append(f"{listed} listed in {args.clients_file}")
    print(f"known clients: {len(clients)} ({', '.join(sources)})")
    for stage, item in zip(plan.stages, reach, strict=True):
        if item.new:
            shown = ", ".join(item.new[:CLIENTS_LISTED]) + (
                " ..." if len(item.new) > CLIENTS_LISTED else ""
            )
            print(f"  {stage.name}: {shown}")
    if clients:
        shown = ", ".join(untouched[:CLIENTS_LISTED]) + (
            " ..." if len(untouched) > CLIENTS_LISTED else ""
        )
        print(
            f"  stay on stable until promotion: {len(untouched)}"
            + (f" ({shown})" if untouched else "")
        )
    start = f"{tempoconf_command()} rollout start {shlex.quote(args.file)}{given_connection_flags(args)}"
    print(f"\nto start it: {start}")
