"""The rollout as a state machine: named states, recorded transitions, the progress object.

Workflow-safe (plain dataclasses and enums): the `status` query returns `RolloutProgress`, and the
phase a person sees is derived from the state by one pure function, `describe_phase`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tempoconf.gates.applied_gate import AppliedGate, describe_gate
from tempoconf.rollout.commands import CommandName

__all__ = [
    "Approval",
    "CheckResult",
    "CommandResult",
    "FINAL_STATES",
    "HealthReport",
    "NOTE",
    "Outcome",
    "RolloutProgress",
    "RolloutResult",
    "RolloutState",
    "StageProgress",
    "StageStatus",
    "TRANSITION",
    "Transition",
    "TransitionKind",
    "Verdict",
    "anything_published",
    "describe_phase",
    "health_word",
    "reason_after",
    "stays_on",
]


class RolloutState(StrEnum):
    PREPARING = "preparing"
    PUBLISHING = "publishing"
    HOLDING = "holding"
    CHECKING_HEALTH = "checking_health"
    AWAITING_APPROVAL = "awaiting_approval"
    WAITING_FOR_WINDOW = "waiting_for_window"
    """Outside every change window: waits (a durable timer) for the next opening to widen."""
    FROZEN = "frozen"
    """The namespace is frozen: waits for the freeze to end (tempoconf.gates.freezes)."""
    WAITING_FOR_APPLY = "waiting_for_apply"
    """The cooldown passed; the stage's `min_applied` share of its cohort has not applied yet."""
    APPLY_TIMED_OUT = "apply_timed_out"
    """`apply_timeout` passed with `min_applied` unmet and `on_apply_timeout: hold`."""
    PROMOTING = "promoting"
    REVERTING = "reverting"
    PROMOTED = "promoted"
    BYPASSED = "bypassed"
    REVERTED = "reverted"
    HALTED = "halted"
    CANCELLED = "cancelled"
    FAILED = "failed"


class Outcome(StrEnum):
    PROMOTED = "promoted"
    BYPASSED = "bypassed"
    REVERTED = "reverted"
    HALTED = "halted"
    CANCELLED = "cancelled"


FINAL_STATES = frozenset(
    {
        RolloutState.PROMOTED,
        RolloutState.BYPASSED,
        RolloutState.REVERTED,
        RolloutState.HALTED,
        RolloutState.CANCELLED,
        RolloutState.FAILED,
    }
)
WAITING_STATES = frozenset(
    {
        RolloutState.HOLDING,
        RolloutState.CHECKING_HEALTH,
        RolloutState.AWAITING_APPROVAL,
        RolloutState.WAITING_FOR_WINDOW,
        RolloutState.FROZEN,
        RolloutState.WAITING_FOR_APPLY,
        RolloutState.APPLY_TIMED_OUT,
    }
)


class StageStatus(StrEnum):
    """Where a stage is: pending, live (published; the current stage), passed (its hold and checks
    passed; it still serves its cohort until promotion, since stages are cumulative) or reverted."""

    PENDING = "pending"
    LIVE = "live"
    PASSED = "passed"
    REVERTED = "reverted"


class Verdict(StrEnum):
    """What a health check concludes."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    NO_DATA = "no_data"
    INCONCLUSIVE = "inconclusive"
    """A sequential judge's interval still holds its tolerance (tempoconf.rollout.sequential)."""


class TransitionKind(StrEnum):
    """A history row: a change of state, or a note (a command that left the state as it was)."""

    TRANSITION = "transition"
    NOTE = "note"


TRANSITION = TransitionKind.TRANSITION
NOTE = TransitionKind.NOTE


@dataclass
class Transition:
    """One row of the rollout's history: a change of state, or a note (an operator command that
    left the state as it was, e.g. pause or approve: then `to_state` is `from_state`)."""

    at: str
    """ISO-8601 UTC, workflow time."""
    from_state: RolloutState
    to_state: RolloutState
    by: str
    reason: str
    stage: str | None = None
    kind: TransitionKind = TransitionKind.TRANSITION
    details: dict[str, Any] = field(default_factory=dict)
    """More for the audit row's details (an approval: its identity, digest and reason)."""


@dataclass
class Approval:
    """One approval of the current stage (tempoconf.rollout.approvals): who, of which plan, why."""

    by: str
    digest: str
    reason: str
    at: str
    emails: list[str] = field(default_factory=list)
    """The emails the API vouched for with the approval (tempoconf.rollout.identities): a later
    approver with one of them is the same person."""


@dataclass
class CheckResult:
    """One health check's verdict: healthy, unhealthy or no_data, with the figures it judged."""

    index: int
    name: str
    kind: str
    verdict: Verdict
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class HealthReport:
    healthy: bool
    summary: str
    checked_at: str
    stage: str | None = None
    checks: list[CheckResult] = field(default_factory=list)
    final: bool = True


def health_word(report: HealthReport | dict[str, Any]) -> str:
    """`UNHEALTHY`, `inconclusive` (a judged check needs more evidence) or `healthy`: a report,
    or its JSON (the status query's)."""
    if isinstance(report, HealthReport):
        healthy, verdicts = report.healthy, [str(check.verdict) for check in report.checks]
    else:
        healthy = bool(report.get("healthy"))
        verdicts = [str(check.get("verdict")) for check in report.get("checks") or []]
    if not healthy or Verdict.UNHEALTHY in verdicts:
        return "UNHEALTHY"
    return "inconclusive" if Verdict.INCONCLUSIVE in verdicts else "healthy"


@dataclass
class StageProgress:
    index: int
    name: str
    cohort: str
    cooldown_seconds: float
    manual: bool
    status: StageStatus = StageStatus.PENDING
    published_at: str | None = None
    hold_deadline: str | None = None
    expires_at: str | None = None
    approvals_required: int = 0
    """Approvals from distinct identities this stage needs (0: none, or one `approve` if manual)."""
    approvals_forbid_author: bool = False
    """The request's author may not approve this stage (`approvals.forbid_author`)."""


@dataclass
class RolloutProgress:
    workflow_id: str
    namespace: str
    path: str
    state: RolloutState = RolloutState.PREPARING
    phase: str = "Preparing"
    version: str | None = None
    stage_index: int = -1
    stage_name: str | None = None
    stage_count: int = 0
    stage_started_at: str | None = None
    hold_deadline: str | None = None
    hold_extended_until: str | None = None
    """While a judged health check is inconclusive past the hold's end (`on_inconclusive:
    extend`): when the extension ends (ISO 8601)."""
    paused: bool = False
    pause_reasons: list[str] = field(default_factory=list)
    approved: bool = False
    """The current stage's approval was given (while paused, it is held until resume)."""
    last_health: HealthReport | None = None
    stages: list[StageProgress] = field(default_factory=list)
    history: list[Transition] = field(default_factory=list)
    outcome: Outcome | None = None
    reason: str = ""
    gate: str | None = None
    """While waiting_for_window or frozen: what it waits for (`the change window, opens Mon 09:00
    Europe/Berlin`; `namespace N frozen by X since T: REASON, until U`)."""
    gate_until: str | None = None
    """While waiting_for_window: when the window opens (ISO 8601); frozen: the freeze's `until`."""
    applied: AppliedGate | None = None
    """The current stage's gate on applied versions, as last checked (None: the stage has none)."""
    stable_version: str | None = None
    """Once ended: the config's stable version, which every client now gets (None: the config has
    no stable version, clients get 404)."""
    changes: list[str] = field(default_factory=list)
    """A changeset's configs, `namespace/path version` each (empty for one config)."""
    change_summaries: list[str] = field(default_factory=list)
    """What each of `changes` changes against its stable (`api "v1" → "v2"`), in their order
    (tempoconf.rollout.change; empty for one config)."""
    digest: str = ""
    """The plan's digest (tempoconf.rollout.digest): what an `approve` names."""
    approvals: list[Approval] = field(default_factory=list)
    """The approvals the current stage has so far (a stage with `approvals`)."""
    author: str = ""
    """The request's author: who may not approve a stage with `approvals.forbid_author`."""
    signed_approvals: bool = False
    """The plan has an `approval_key`: an `approve` counts only through the tempoconf API, which
    signs it (tempoconf.rollout.signatures)."""
    approval_run: str = ""
    """The rollout's run a signed approval names, with the stage and a nonce (its first run's
    id, the same across continue-as-new; tempoconf.rollout.signatures.bound_message); "": a run
    started before patch `approvals-bound-to-run-and-stage`, which takes the older form."""


@dataclass
class RolloutResult:
    outcome: Outcome
    version: str | None
    reason: str = ""
    stable_version: str | None = None
    """The version every client gets after the rollout; None when the config has none (404)."""


@dataclass
class CommandResult:
    """What an update (halt, bypass, advance, pause, resume, approve) answers: a short result.
    The full progress stays the `status` query."""

    command: CommandName
    accepted: bool
    """False when the command changed nothing (e.g. a second halt)."""
    state: RolloutState
    """The state once the command took effect (or, if it has not yet, the state now)."""
    phase: str
    stage: str | None
    stage_number: int
    """1-based, as status shows; 0 before the first stage."""
    stage_count: int
    paused: bool
    message: str
    """What the command did; starts with `requested:` when the rollout has not acted on it yet."""


def _clock(iso: str | None) -> str:
    """`2026-11-29T10:11:12.97+00:00` → `2026-11-29 10:11:12 UTC`."""
    return f"{iso[:10]} {iso[11:19]} UTC" if iso else "?"


def _back_to(progress: RolloutProgress) -> str:
    """What a reverted rollout left its clients on: the stable version, or nothing (404)."""
    if progress.changes:
        # `stable_version` is the first config's only: named after a halt through another config
        # of the changeset, it read as that one's.
        return "to each config's stable version"
    if progress.stable_version:
        return f"to stable {progress.stable_version}"
    return "to no version (the config has none stable: clients get 404, as before)"


def anything_published(progress: RolloutProgress) -> bool:
    """Whether some stage of the rollout was published (reached some client) at some point."""
    return any(stage.published_at for stage in progress.stages)


def stays_on(progress: RolloutProgress) -> str:
    """What the clients of a rollout that published nothing stay on: `every client stays on
    stable V`, or, for a config with no stable version, that they get 404 as before."""
    if progress.changes:  # one version would be the first config's only (see _back_to)
        return "every client stays on each config's stable version"
    if progress.stable_version:
        return f"every client stays on stable {progress.stable_version}"
    return "the config has no stable version: clients get 404, as before"


def _ended(progress: RolloutProgress, verb: str, reason: str) -> str:
    """`Halted, back to stable V: REASON`; for a rollout that published nothing, `Halted before
    anything was published (every client stays on stable V): REASON`."""
    why = f": {reason}" if reason else ""
    if not anything_published(progress):
        return f"{verb} before anything was published ({stays_on(progress)}){why}"
    joint = " " if verb == "Reverted" else ", back "
    return f"{verb}{joint}{_back_to(progress)}{why}"


def _applied_figures(progress: RolloutProgress) -> str:
    gate = progress.applied
    if gate is None or not gate.checked_at:
        return ""
    return f": {describe_gate(gate)}"


def reason_after(outcome: str, reason: str) -> str:
    """`reason`, said after its `outcome`'s own name: a bypass's reason reads `bypassed: <why>` (the
    words of its audit row and result), and `bypassed: bypassed: <why>` would say it twice."""
    return reason.removeprefix(f"{outcome}: ")


def describe_phase(progress: RolloutProgress) -> str:
    """What a person should read as the rollout's phase: one pure function of the state."""
    state = RolloutState(progress.state)
    stage = f" {progress.stage_name}" if progress.stage_name else ""
    if progress.pause_reasons and state in WAITING_STATES:
        held = " (approved; it moves on at resume)" if progress.approved else ""
        return f"Paused at{stage}{held}: " + "; ".join(progress.pause_reasons)
    return {
        RolloutState.PREPARING: "Preparing: validating the request and taking the config's lock",
        RolloutState.PUBLISHING: f"Publishing stage{stage}",
        RolloutState.HOLDING: f"Holding stage{stage} until {_clock(progress.hold_deadline)}",
        RolloutState.CHECKING_HEALTH: f"Checking the health of stage{stage}"
        + (
            f" (hold extended until {_clock(progress.hold_extended_until)}: inconclusive)"
            if progress.hold_extended_until
            else ""
        ),
        RolloutState.AWAITING_APPROVAL: f"Waiting for approval to leave stage{stage}",
        RolloutState.WAITING_FOR_WINDOW: f"Waiting for {progress.gate or 'the change window'}",
        RolloutState.FROZEN: f"Frozen: {progress.gate or 'the namespace is frozen'}",
        RolloutState.WAITING_FOR_APPLY: f"Waiting for clients of stage{stage} to apply the "
        f"version{_applied_figures(progress)}",
        RolloutState.APPLY_TIMED_OUT: f"Apply timeout of stage{stage} passed, held for an "
        f"operator (advance or halt){_applied_figures(progress)}",
        RolloutState.PROMOTING: "Promoting the version to stable",
        RolloutState.REVERTING: f"Reverting: {progress.reason}",
        RolloutState.PROMOTED: "Promoted: the version is stable",
        RolloutState.BYPASSED: "Bypassed to stable: "
        + reason_after(Outcome.BYPASSED.value, progress.reason),
        RolloutState.REVERTED: _ended(progress, "Reverted", progress.reason),
        RolloutState.HALTED: _ended(progress, "Halted", progress.reason),
        RolloutState.CANCELLED: _ended(progress, "Cancelled", ""),
        RolloutState.FAILED: f"Failed: {progress.reason}",
    }[state]
