"""`tempoconf rollout status PATH [--watch] [--json]`: a rollout's progress, as a person reads it.

The view joins three sources: the workflow (`describe`, the `status` query, and its result once it
ended), the store (who started it and why, the version's metadata, the current stable) and the
settings (the Web UI link and the exact commands that steer the rollout).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from tempoconf.cli._backend import OperatorBackend, ViewUnavailable, operator_backend
from tempoconf.cli._common import (
    SUCCESSFUL_OUTCOMES,
    die,
    path_args,
    settings_from_args,
    tempoconf_command,
    temporal_command,
    workflow_ui_url,
)
from tempoconf.cli._format import duration_text, relative_text, table, utc_text, zoned_text
from tempoconf.cli.schema import check_config_name
from tempoconf.operations.view import RolloutSnapshot, StoreContext, unavailable_message
from tempoconf.rollout.approvals import approvals_wanted
from tempoconf.rollout.details import approve_argument, time_left
from tempoconf.rollout.progress import health_word, reason_after
from tempoconf.settings import Settings
from tempoconf.temporal.names import rollout_workflow_id

__all__ = [
    "EXIT_NO_ANSWER",
    "RolloutSnapshot",
    "StoreContext",
    "format_store_view",
    "format_view",
    "status_command",
    "steering_commands",
]

TRANSITIONS_SHOWN = 6
EXIT_NO_ANSWER = 3
"""`rollout status`: the workflow did not answer (no worker); the store's view was printed."""
CLEAR_SCREEN = "\x1b[H\x1b[2J"


# -- the view ----------------------------------------------------------------------------------
def steering_commands(
    settings: Settings,
    namespace: str,
    path: str,
    workflow_id: str,
    *,
    approve: bool,
    advance: bool = False,
    digest: str = "",
    approvals: str = "",
    signed: bool = False,
) -> list[str]:
    """The exact commands that halt, bypass (advance, approve) this rollout: tempoconf and
    Temporal CLI. `advance`: the rollout holds, or waits at an apply gate, so `advance` acts now.

    The approve commands name the plan's `digest` (a stage with approvals refuses one without);
    `approvals` is who may still approve such a stage (tempoconf.rollout.approvals.approvals_wanted),
    whose Temporal CLI command then carries a `by` to fill in. `signed`: the rollout takes
    approvals only through tempoconf's API (its plan has an `approval_key`), so no Temporal CLI
    approve is printed."""
    tempoconf, temporal = tempoconf_command(), temporal_command()
    target = path_args(namespace, path)
    if workflow_id != rollout_workflow_id(namespace, path):
        target += f" --id '{workflow_id}'"
    where = f"--address {settings.resolved_temporal_address}" + (
        f" --namespace {settings.temporal_namespace}"
        if settings.temporal_namespace != "default"
        else ""
    )
    lines = [
        f"halt     {tempoconf} rollout halt {target} --reason '...'",
        f"         {temporal} workflow signal {where} -w '{workflow_id}' --name halt "
        """--input '{"reason": "..."}'""",
        f"bypass   {tempoconf} rollout bypass {target} --reason '...'",
        f"         {temporal} workflow signal {where} -w '{workflow_id}' --name bypass "
        """--input '{"reason": "..."}'""",
    ]
    if advance:
        lines += [
            f"advance  {tempoconf} rollout advance {target}",
            f"         {temporal} workflow update execute {where} -w '{workflow_id}' "
            "--name advance",
        ]
    if approve:
        plan = f" --digest {digest}" if digest else ""
        argument = approve_argument(digest, approvals=bool(approvals))
        given = f" --input '{json.dumps(argument)}'" if argument else ""
        lines.append(f"approve  {tempoconf} rollout approve {target}{plan} --reason '...'")
        if approvals:
            lines.append(f"         # {approvals}")
        if signed:
            # The rollout counts only the API's signed approvals: the Temporal CLI's is refused.
            lines.append(
                "         # this rollout takes approvals only through tempoconf's API (signed): "
                "not through the Temporal CLI"
            )
        else:
            lines.append(
                f"         {temporal} workflow update execute {where} -w '{workflow_id}' "
                "--name approve" + given
            )
    return lines


def approval_stage(progress: dict[str, Any]) -> dict[str, Any] | None:
    """The stage an `approve` is for: the current one while it awaits approval, else the next
    manual stage not passed yet; None when there is none."""
    stages = progress.get("stages") or []
    if progress.get("state") == "awaiting_approval":
        return next((s for s in stages if s.get("index") == progress.get("stage_index")), None)
    return next(
        (s for s in stages if s.get("manual") and s.get("status") in ("pending", "live")), None
    )


def approvals_note(progress: dict[str, Any]) -> str:
    """Who may still approve the stage `approval_stage` finds, if it needs approvals: `approvals
    1/2 (bob): 1 more, not the author (alice@example.com), not bob (approved already)`."""
    stage = approval_stage(progress)
    if stage is None or not stage.get("approvals_required"):
        return ""
    current = stage.get("index") == progress.get("stage_index")
    return approvals_wanted(
        required=int(stage["approvals_required"]),
        approved_by=[str(a.get("by")) for a in progress.get("approvals") or []] if current else [],
        author=str(progress.get("author") or ""),
        # A run from before this field: its plan's default, which forbids the author.
        forbid_author=bool(stage.get("approvals_forbid_author", True)),
    )


def _figures(figures: dict[str, Any]) -> str:
    def text(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}={text(v)}" for k, v in sorted(value.items())) + "}"
        return "-" if value is None else str(value)

    return " ".join(f"{key}={text(value)}" for key, value in sorted(figures.items()))


def approval_cell(stage: dict[str, Any], progress: dict[str, Any]) -> str:
    """`manual`; for a stage with approvals, `approvals 1/2 (alice)` (the current stage) or
    `approvals: 2` (another)."""
    required = stage.get("approvals_required") or 0
    if not required:
        return "manual" if stage.get("manual") else ""
    if stage.get("index") != progress.get("stage_index"):
        return f"approvals: {required}"
    names = [str(approval.get("by")) for approval in progress.get("approvals") or []]
    return f"approvals {len(names)}/{required}" + (f" ({', '.join(names)})" if names else "")


def _hold_cell(stage: dict[str, Any], progress: dict[str, Any], now: datetime) -> str:
    current = stage.get("index") == progress.get("stage_index")
    if current and progress.get("state") == "holding" and progress.get("hold_deadline"):
        return relative_text(progress["hold_deadline"], now=now)
    if stage.get("hold_deadline"):
        return "done"  # the planned deadline; an `advance` or bypass may have ended it earlier
    return f"{duration_text(float(stage.get('cooldown_seconds') or 0))} hold"


def _applied_lines(raw: dict[str, Any] | None) -> list[str]:
    """The current stage's gate on applied versions: figures, then the first stragglers."""
    if not raw:
        return []
    from tempoconf.gates.applied_gate import describe_gate, gate_from_json, straggler_lines

    gate = gate_from_json(raw)
    lines = ["", f"  applied    {describe_gate(gate)} (at {zoned_text(gate.checked_at)})"]
    if gate.deadline:
        lines.append(
            f"  apply timeout {zoned_text(gate.deadline)}" + (" (passed)" if gate.timed_out else "")
        )
    stragglers = straggler_lines(gate)
    if stragglers:
        lines.append("  stragglers:")
        lines += [f"    {line}" for line in stragglers]
    return lines


def format_view(
    snapshot: RolloutSnapshot,
    *,
    namespace: str,
    path: str,
    context: StoreContext | None = None,
    settings: Settings | None = None,
    now: datetime | None = None,
) -> str:
    """The readable status view (every time in UTC, and saying so)."""
    now = now or datetime.now(UTC)
    context = context or StoreContext()
    progress = snapshot.progress or {}
    state = progress.get("state") or snapshot.outcome or "?"
    version = progress.get("version") or snapshot.result_version
    changes = progress.get("changes") or []
    summaries = progress.get("change_summaries") or []
    # A changeset is every config's rollout: named by all of them, each listed below.
    subject = f"changeset of {len(changes)} configs" if changes else f"{namespace}/{path}"
    lines = [f"rollout of {subject}  (workflow {snapshot.workflow_id}, {snapshot.execution})"]
    phase = progress.get("phase") or (
        f"{snapshot.outcome}: {reason_after(snapshot.outcome, snapshot.reason)}"
        if snapshot.outcome
        else ""
    )
    lines.append(f"  state      {state}: {phase}" if progress else f"  state      {phase or state}")
    if state == "waiting_for_window" and progress.get("gate_until"):
        # How long until the window opens, as of this view (the phase names the opening itself).
        opens = datetime.fromisoformat(progress["gate_until"])
        lines[-1] += f" (in {time_left((opens - now).total_seconds())})"
    about = [part for part in (context.author, context.commit, context.message) if part]
    lines.append(
        f"  version    {version or '-'}"
        + (f"  ({', '.join(about)})" if about else "")
        + (
            f"; stable is {context.stable}"
            if context.stable and context.stable != version
            else ("; now stable" if context.stable and context.stable == version else "")
        )
    )
    for number, change in enumerate(changes):  # a changeset: its configs share the stages below
        told = f": {summaries[number]}" if number < len(summaries) and summaries[number] else ""
        lines.append(f"  {'configs' if number == 0 else '':<10} {change}{told}")
    if progress.get("digest"):
        lines.append(f"  digest     {progress['digest']}")
    # The audit log names the request's author ("workflow" when it gave none); the run's history
    # names the client that started it (the Temporal CLI, tempoconf, the Web UI).
    author = context.started_by if context.started_by not in ("", "workflow") else ""
    starter = "" if author and author in snapshot.starter else snapshot.starter
    who = " via ".join(part for part in (author, starter) if part)
    if who or context.started_at:
        lines.append(
            f"  started    by {who or 'unknown'}"
            + (f" at {zoned_text(context.started_at)}" if context.started_at else "")
            + (f": {context.start_reason}" if context.start_reason else "")
        )
    count = progress.get("stage_count") or 0
    index = progress.get("stage_index", -1)
    if progress:
        if count:
            stage_text = (
                f"{index + 1}/{count} {progress.get('stage_name')}"
                if index is not None and index >= 0
                else f"not started (0/{count})"
            )
            if progress.get("stage_started_at") and snapshot.running:
                stage_text += f", since {zoned_text(progress['stage_started_at'])}"
            lines.append(f"  stage      {stage_text}")
        elif state not in ("preparing", "failed"):
            lines.append("  stage      none (promote directly)")
        if snapshot.running and progress.get("hold_deadline"):
            lines.append(
                f"  hold       ends {relative_text(progress['hold_deadline'], now=now)} "
                f"({zoned_text(progress['hold_deadline'])})"
            )
        reasons = progress.get("pause_reasons") or []
        lines.append(f"  paused     {'yes: ' + '; '.join(reasons) if reasons else 'no'}")
    outcome = progress.get("outcome") or snapshot.outcome
    if outcome or not snapshot.running:
        reason = progress.get("reason") or snapshot.reason
        lines.append(
            f"  outcome    {outcome or snapshot.execution.lower()}"
            + (f": {reason_after(outcome or '', reason)}" if reason else "")
        )

    stages = progress.get("stages") or []
    if stages:
        lines.append("")
        rows = [
            [
                stage.get("index", 0) + 1,
                stage.get("name"),
                stage.get("cohort"),
                stage.get("status", ""),
                utc_text(stage.get("published_at"), date=False),
                _hold_cell(stage, progress, now),
                approval_cell(stage, progress),
            ]
            for stage in stages
        ]
        lines += table(
            ["#", "STAGE", "COHORT", "STATUS", "PUBLISHED (UTC)", "HOLD", "APPROVAL"],
            rows,
            indent="  ",
        )

    lines += _applied_lines(progress.get("applied"))
    health = progress.get("last_health")
    lines.append("")
    if health:
        verdict = health_word(health)
        lines.append(
            f"  health     {verdict} at {zoned_text(health.get('checked_at'))}"
            + (f" ({health.get('stage')})" if health.get("stage") else "")
            + ("" if health.get("final", True) else ", interval check")
        )
        checks = health.get("checks") or []
        if not checks:
            lines[-1] += f": {health.get('summary')}"
        if checks:
            lines += table(
                ["CHECK", "KIND", "VERDICT", "FIGURES"],
                [
                    [
                        check.get("name"),
                        check.get("kind"),
                        check.get("verdict"),
                        _figures(check.get("figures") or {}) or check.get("summary", ""),
                    ]
                    for check in checks
                ],
                indent="    ",
            )
            for check in checks:
                lines.append(f"    {check.get('name')}: {check.get('summary')}")
    elif progress:
        lines.append("  health     not checked yet")

    history = progress.get("history") or []
    if history:
        shown = history[-TRANSITIONS_SHOWN:]
        lines.append(f"  history (last {len(shown)} of {len(history)})")
        for item in shown:
            where = f" [{item['stage']}]" if item.get("stage") else ""
            why = f": {item['reason']}" if item.get("reason") else ""
            # A note (a command that left the state as it was) is not shown as `holding → holding`.
            change = (
                f"note ({item.get('to_state')})"
                if item.get("kind") == "note" or item.get("from_state") == item.get("to_state")
                else f"{item.get('from_state')} → {item.get('to_state')}"
            )
            lines.append(
                f"    {zoned_text(item.get('at'))}  {change}{where}  by {item.get('by')}{why}"
            )
    if settings is not None:
        if snapshot.running:
            approve = approval_stage(progress) is not None
            lines.append("  commands")
            lines += [
                f"    {line}"
                for line in steering_commands(
                    settings,
                    namespace,
                    path,
                    snapshot.workflow_id,
                    approve=approve,
                    # what the Web UI's commands offer too (tempoconf.rollout.details)
                    advance=state in ("holding", "waiting_for_apply", "apply_timed_out"),
                    digest=str(progress.get("digest") or ""),
                    approvals=approvals_note(progress),
                    signed=bool(progress.get("signed_approvals")),
                )
            ]
        lines.append(
            f"  Web UI     {workflow_ui_url(settings, snapshot.workflow_id, snapshot.run_id)}"
        )
    lines += [f"  note: {note}" for note in context.notes]
    return "\n".join(lines)


# -- the command -------------------------------------------------------------------------------
def status_command(args: argparse.Namespace) -> int:
    check_config_name(args.namespace, args.path)
    if args.interval <= 0:
        die("--interval must be greater than zero", exit_code=2)
    settings = settings_from_args(args)
    return asyncio.run(_status(settings, args))


async def _status(settings: Settings, args: argparse.Namespace) -> int:
    namespace, path = args.namespace, args.path
    async with operator_backend(settings) as backend:
        shown = False
        while True:
            try:
                snapshot, context = await backend.rollout_view(namespace, path, args.workflow_id)
                break
            except ViewUnavailable as error:
                if error.kind != "no_answer":
                    die(_unavailable(error, namespace, path))
                # No worker answers the workflow's query: what the store knows, at once; --watch
                # shows it once and asks again until a worker answers.
                if not shown:
                    if args.json:
                        print(json.dumps(_store_json(error), indent=2), flush=True)
                    else:
                        view = format_store_view(
                            error, namespace=namespace, path=path, settings=settings
                        )
                        print(view, flush=True)
                    print(f"tempoconf: {_unavailable(error, namespace, path)}", file=sys.stderr)
                    shown = True
                if not args.watch:
                    return EXIT_NO_ANSWER
                await asyncio.sleep(args.interval)
        if not args.watch:
            if args.json:
                print(json.dumps(_json_object(snapshot), indent=2))
            else:
                print(_render(snapshot, context, settings, namespace, path))
            return 0
        return await _watch(backend, settings, args, snapshot, context)


def format_store_view(
    unanswered: ViewUnavailable, *, namespace: str, path: str, settings: Settings
) -> str:
    """The rollout as the store recorded it, when its workflow did not answer (no worker): the
    active rollout's row, the lock holder and who started it."""
    rollout, lock = unanswered.rollout, unanswered.lock
    context = unanswered.context or StoreContext()
    lines = [
        f"rollout of {namespace}/{path}  (workflow {unanswered.workflow_id}: did not answer; "
        "as the store recorded it)"
    ]
    if rollout is not None:
        lines.append(
            f"  state      {rollout.state} (the last step the store recorded, at "
            f"{zoned_text(rollout.updated_at)})"
        )
        lines.append(
            f"  version    {rollout.version}"
            + (f"; stable is {context.stable}" if context.stable else "")
        )
        published = rollout.stage_index + 1
        lines.append(
            f"  stage      {published} published" if published else "  stage      none published"
        )
        lines.append(f"  run        {rollout.run_id}")
    else:
        lines.append("  state      no active rollout in the store")
    if context.started_by or context.started_at or rollout is not None:
        started_at = context.started_at or (rollout.started_at if rollout is not None else None)
        lines.append(
            f"  started    by {context.started_by or 'unknown'}"
            + (f" at {zoned_text(started_at)}" if started_at else "")
            + (f": {context.start_reason}" if context.start_reason else "")
        )
    if lock is not None:
        lines.append(
            f"  lock       held by workflow {lock.workflow_id}, run {lock.run_id} (version "
            f"{lock.version}), since {zoned_text(lock.acquired_at)}"
        )
    else:
        lines.append("  lock       free")
    lines.append(f"  workflow   {unanswered.detail}")
    lines.append(
        f"  Web UI     {workflow_ui_url(settings, unanswered.workflow_id, lock.run_id if lock else None)}"
    )
    return "\n".join(lines)


def _store_json(unanswered: ViewUnavailable) -> dict[str, Any]:
    """`--json` when the workflow did not answer: the store's rows and why (`answered` false)."""

    def row(record: Any) -> dict[str, Any] | None:
        if record is None:
            return None
        return {
            key: value.isoformat() if isinstance(value, datetime) else value
            for key, value in asdict(record).items()
        }

    return {
        "workflow_id": unanswered.workflow_id,
        "answered": False,
        "error": unanswered.detail,
        "rollout": row(unanswered.rollout),
        "lock": row(unanswered.lock),
    }


def _unavailable(error: ViewUnavailable, namespace: str, path: str) -> str:
    if error.kind == "unavailable":  # the admin API could not reach Temporal
        return f"cannot read the status of {error.workflow_id!r}: {error.detail}"
    return unavailable_message(
        error.kind, error.detail, workflow_id=error.workflow_id, name=f"{namespace}/{path}"
    )


def _json_object(snapshot: RolloutSnapshot) -> dict[str, Any]:
    """The raw `status` object; for a closed run no worker could replay, its result instead."""
    if snapshot.progress is not None:
        return snapshot.progress
    return {
        "workflow_id": snapshot.workflow_id,
        "state": snapshot.outcome,
        "outcome": snapshot.outcome,
        "version": snapshot.result_version,
        "reason": snapshot.reason,
    }


def _render(
    snapshot: RolloutSnapshot,
    context: StoreContext,
    settings: Settings,
    namespace: str,
    path: str,
) -> str:
    return format_view(snapshot, namespace=namespace, path=path, context=context, settings=settings)


async def _watch(
    backend: OperatorBackend,
    settings: Settings,
    args: argparse.Namespace,
    snapshot: RolloutSnapshot,
    context: StoreContext,
) -> int:
    """Redraw until the run closes (TTY: in place; otherwise a new block per change); the exit code
    is the outcome's (0 when promoted or bypassed)."""
    tty = sys.stdout.isatty()
    last_key: str | None = None
    problem: str | None = None
    while True:
        key = json.dumps([_json_object(snapshot), snapshot.execution], sort_keys=True)
        if args.json:
            if key != last_key:
                print(json.dumps(_json_object(snapshot)), flush=True)
        elif tty:
            view = _render(snapshot, context, settings, args.namespace, args.path)
            footer = (
                f"\n\nwatching every {args.interval:g}s; Ctrl-C stops watching (not the rollout)"
            )
            print(CLEAR_SCREEN + view + (f"\n{problem}" if problem else "") + footer, flush=True)
        elif key != last_key:
            if last_key is not None:
                print(f"\n--- {zoned_text(datetime.now(UTC))} ---")
            print(_render(snapshot, context, settings, args.namespace, args.path), flush=True)
        last_key = key
        if not snapshot.running:
            break
        await asyncio.sleep(args.interval)
        try:
            snapshot, context = await backend.rollout_view(
                args.namespace, args.path, snapshot.workflow_id
            )
            problem = None
        except ViewUnavailable as error:
            # A worker restart or a slow query is no reason to stop watching: say so and retry.
            problem = f"(could not refresh at {zoned_text(datetime.now(UTC), date=False)}: {error})"
            if not tty:
                print(problem, file=sys.stderr, flush=True)
    outcome = (snapshot.progress or {}).get("outcome") or snapshot.outcome or "unknown"
    reason = (snapshot.progress or {}).get("reason") or snapshot.reason
    if not args.json:
        print(f"\nrollout ended: {outcome}" + (f" ({reason})" if reason else ""), flush=True)
    return 0 if outcome in SUCCESSFUL_OUTCOMES else 1
