"""The rollout's *current details*: markdown the Temporal Web UI shows on the workflow's page.

A pure function of the progress, the plan and the workflow's clock, so it is tested without
Temporal. The workflow sets the details on every change of state; nothing re-renders them in
between, so every time left is stated "as of" the moment they were rendered.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime

from tempoconf.gates.applied_gate import describe_gate, straggler_lines
from tempoconf.rollout.approvals import approvals_line
from tempoconf.rollout.plan import PlannedStage, RolloutPlan
from tempoconf.rollout.progress import (
    FINAL_STATES,
    RolloutProgress,
    RolloutState,
    StageProgress,
    health_word,
    reason_after,
)

__all__ = ["approve_argument", "render_current_details", "steering_command", "time_left"]

DEFAULT_TEMPORAL_NAMESPACE = "default"


def _clock(iso: str | None) -> str:
    """`2026-11-29T10:11:12.97+00:00` → `10:11:12 UTC` (the date when it is not today's is noise here)."""
    if not iso:
        return "?"
    return iso[11:19] + " UTC"


def time_left(seconds: float) -> str:
    """`4m12s`, `45s`, `1h05m`, `2d03h`: rounded down, two units at most."""
    whole = max(int(seconds), 0)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _hold_end(deadline_iso: str, now: datetime, *, as_of: bool) -> str:
    """`ends 12:55:35 UTC, in 4m12s (as of 12:51:23 UTC)`; the date too when it is not today."""
    deadline = datetime.fromisoformat(deadline_iso)
    left = (deadline - now).total_seconds()
    if left <= 0:
        return "ending now"
    day = f"{deadline_iso[:10]} " if deadline.date() != now.date() else ""
    when = f" (as of {_clock(now.isoformat())})" if as_of else ""
    return f"ends {day}{_clock(deadline_iso)}, in {time_left(left)}{when}"


def steering_command(
    plan: RolloutPlan,
    workflow_id: str,
    verb: str,
    name: str,
    *,
    reason: bool,
    argument: dict[str, str] | None = None,
) -> str:
    """A Temporal CLI command that runs as printed: the CLI as the worker's machine types it,
    the server's address and namespace, the quoted workflow id; `--input` `{"reason": "..."}`
    with `reason`, or `argument` when given."""
    words = [plan.temporal_cli or "temporal", "workflow", *verb.split()]
    if plan.temporal_address:
        words += ["--address", plan.temporal_address]
    if plan.temporal_namespace and plan.temporal_namespace != DEFAULT_TEMPORAL_NAMESPACE:
        words += ["--namespace", plan.temporal_namespace]
    words += ["-w", workflow_id, "--name", name]
    if argument is not None:
        words += ["--input", json.dumps(argument)]
    elif reason:
        words += ["--input", json.dumps({"reason": "..."})]
    return " ".join(shlex.quote(word) for word in words)


def approve_argument(digest: str, *, approvals: bool) -> dict[str, str] | None:
    """The `--input` of an `approve` typed into the Temporal CLI: the plan's digest, and who
    approves (`by`, required, with the name to fill in) on a stage with `approvals`."""
    if not digest:
        return None
    return {"by": "...", "digest": digest} if approvals else {"digest": digest}


def _waits_for(progress: RolloutProgress, plan: RolloutPlan | None, now: datetime) -> str | None:
    state = RolloutState(progress.state)
    if state in FINAL_STATES:
        return None
    stage = (
        plan.stages[progress.stage_index]
        if plan and 0 <= progress.stage_index < len(plan.stages)
        else None
    )
    waits_for = None
    if state == RolloutState.HOLDING and progress.hold_deadline:
        checks = f", then {len(stage.health)} health check(s)" if stage and stage.health else ""
        waits_for = f"the hold to end: {_hold_end(progress.hold_deadline, now, as_of=True)}{checks}"
    elif state == RolloutState.CHECKING_HEALTH:
        waits_for = "the health checks of this stage"
        if progress.hold_extended_until:
            waits_for += (
                f": the hold is extended until {_clock(progress.hold_extended_until)} while a "
                "judged check is inconclusive (then its after_extension decides)"
            )
    elif state == RolloutState.AWAITING_APPROVAL:
        waits_for = "an operator's approve (the hold and health checks of this stage passed)"
    elif state in (RolloutState.WAITING_FOR_WINDOW, RolloutState.FROZEN):
        waits_for = _gate_wait(progress, now)
    elif state in (RolloutState.WAITING_FOR_APPLY, RolloutState.APPLY_TIMED_OUT):
        waits_for = _waits_for_apply(progress, stage)
    if progress.pause_reasons:
        # A pause does not stop a running hold or check; it keeps the rollout from leaving the stage.
        paused = "resume (paused: " + "; ".join(progress.pause_reasons) + ")"
        return f"{waits_for}; then {paused}" if waits_for else paused
    return waits_for


def _gate_wait(progress: RolloutProgress, now: datetime) -> str:
    """`the change window, opens Mon 09:00 Europe/Berlin (in 14h00m, as of 19:00:00 UTC)`, or the
    freeze that holds the rollout (change windows and freezes: tempoconf.gates.windows, .freezes)."""
    if progress.state == RolloutState.FROZEN:
        return f"the freeze to end: {progress.gate} (looked at again every 30s)"
    gate = progress.gate or "the change window"
    if progress.gate_until:
        left = (datetime.fromisoformat(progress.gate_until) - now).total_seconds()
        return f"{gate} (in {time_left(left)}, as of {_clock(now.isoformat())})"
    return gate


def _waits_for_apply(progress: RolloutProgress, stage: PlannedStage | None) -> str:
    share = f"{(stage.min_applied or 1) * 100:g}% of" if stage else "the required share of"
    if progress.state == RolloutState.APPLY_TIMED_OUT:
        return f"an operator: advance (go on as is) or halt; the apply timeout passed before {share} the cohort applied"
    timeout = progress.applied.deadline if progress.applied else None
    until = f" (apply timeout {_clock(timeout)})" if timeout else ""
    return f"{share} this stage's cohort to report the version applied{until}"


def _applied_section(progress: RolloutProgress) -> list[str]:
    """The current stage's gate on applied versions: the figures and the first stragglers."""
    gate = progress.applied
    if gate is None:
        return []
    lines = [f"Applied ({_clock(gate.checked_at)}): {describe_gate(gate)}", ""]
    stragglers = straggler_lines(gate)
    if stragglers:
        lines += ["Stragglers:", "", *(f"- {line}" for line in stragglers), ""]
    return lines


def _stage_line(stage: StageProgress, progress: RolloutProgress, now: datetime) -> str:
    notes: list[str] = [stage.status]
    # Only a hold that is running has an end worth showing: once it is over (checks, approval,
    # promotion) its time is in the past and would only mislead.
    holding = progress.state == RolloutState.HOLDING and stage.index == progress.stage_index
    if holding and progress.hold_deadline:
        notes.append(f"hold {_hold_end(progress.hold_deadline, now, as_of=False)}")
    if stage.manual:
        notes.append("manual approval")
    return f"{stage.index + 1}. **{stage.name}**: {stage.cohort} ({', '.join(notes)})"


def render_current_details(
    progress: RolloutProgress, plan: RolloutPlan | None, *, now: datetime
) -> str:
    """Markdown for the Web UI (User Metadata → Current Details): the change, what is live for
    whom, what the rollout waits for, the last health result, and the commands to steer it.
    `now` is the workflow's clock: times left are as of this rendering."""
    config = f"{progress.namespace}/{progress.path}"
    change = plan.change if plan is not None else ""
    lines = [f"## {config}: {change}" if change else f"## {config}", ""]
    if plan is not None and plan.changes:  # a changeset: every config, one stage ladder
        lines = [f"## changeset of {len(plan.changes)} configs", ""]
        lines += [f"- {c.namespace}/{c.path}: {c.change} (`{c.version}`)" for c in plan.changes]
        lines.append("")
    # A changeset's versions are each config's, listed above: none of them stands for the rest.
    parts = [] if plan is not None and plan.changes else [f"version `{progress.version or '?'}`"]
    if plan is not None and (plan.author or plan.message):
        about = f"{plan.message or 'no message'} — {plan.author or 'unknown author'}"
        parts.append(about + (f" (commit `{plan.commit}`)" if plan.commit else ""))
    if parts:
        lines += [" · ".join(parts), ""]
    if progress.digest:
        # What an approve names (tempoconf.rollout.digest); with the approvals so far, if the stage needs some.
        approvals = approvals_line(plan, progress)
        lines += [f"plan digest `{progress.digest}`" + (f" · {approvals}" if approvals else ""), ""]
    lines += [f"**{progress.phase}**", ""]
    waits_for = _waits_for(progress, plan, now)
    if waits_for:
        lines += [f"Waiting for: {waits_for}", ""]
    lines += [_stage_line(stage, progress, now) for stage in progress.stages]
    if progress.stages:
        lines.append("")
    if progress.last_health:
        verdict = health_word(progress.last_health)
        lines += [
            f"Last health check ({_clock(progress.last_health.checked_at)}): **{verdict}**",
            "",
        ]
        lines += [
            f"- {check.name}: {check.verdict}: {check.summary}"
            for check in progress.last_health.checks
        ]
        if progress.last_health.checks:
            lines.append("")
    lines += _applied_section(progress)
    state = RolloutState(progress.state)
    if state not in FINAL_STATES and plan is not None:
        # Only once prepare has told where the server is: a command without it would not run.
        def command(
            verb: str, name: str, *, reason: bool = False, argument: dict[str, str] | None = None
        ) -> str:
            typed = steering_command(
                plan, progress.workflow_id, verb, name, reason=reason, argument=argument
            )
            return f"`{typed}`"

        lines += [
            "Commands:",
            "",
            f"- halt (back to stable): {command('signal', 'halt', reason=True)}",
            f"- bypass (promote now): {command('signal', 'bypass', reason=True)}",
        ]
        if state == RolloutState.HOLDING:
            lines.append(f"- end this hold now: {command('update execute', 'advance')}")
        if state == RolloutState.AWAITING_APPROVAL:
            stage = (
                plan.stages[progress.stage_index]
                if 0 <= progress.stage_index < len(plan.stages)
                else None
            )
            four_eyes = stage is not None and stage.approvals is not None
            argument = approve_argument(progress.digest, approvals=four_eyes)
            who = approvals_line(plan, progress) if four_eyes else None
            if plan.approval_key:
                # The Temporal CLI cannot sign: its approve would be refused.
                digest = f" --digest {progress.digest}" if progress.digest else ""
                target = progress.path + (
                    f" --namespace {progress.namespace}"
                    if progress.namespace not in ("", "default")
                    else ""
                )
                lines.append(
                    f"- approve{f' ({who})' if who else ''}: through tempoconf's API only "
                    f"(this rollout takes signed approvals): `tempoconf rollout approve "
                    f"{target}{digest}`"
                )
            else:
                lines.append(
                    f"- approve{f' ({who})' if who else ''}: "
                    f"{command('update execute', 'approve', argument=argument)}"
                )
        if state in (RolloutState.WAITING_FOR_APPLY, RolloutState.APPLY_TIMED_OUT):
            lines.append(f"- pass the apply gate as is: {command('update execute', 'advance')}")
        if progress.pause_reasons:
            lines.append(f"- resume: {command('update execute', 'resume')}")
    elif progress.outcome:
        said = reason_after(progress.outcome, progress.reason)
        lines.append(f"Outcome: **{progress.outcome}** — {said}")
    return "\n".join(lines)
