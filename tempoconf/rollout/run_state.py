"""The whole state of one rollout run, and the bookkeeping on it that needs no engine.

`RolloutRunState` is every field the `ConfigRollout` workflow keeps between two steps: the
progress the `status` query returns, the plan, the operator commands waiting to be acted on, the
failure counts, the leases, what the audit log and the search attributes already hold. It is a
plain dataclass the default converter carries (continue-as-new can hand it to the next run).

Its methods are pure: the workflow passes in the clock (`at`, `now`) and does the side effects
(activities, timers, search attributes, the Web UI's details) itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from tempoconf.rollout.approvals import (
    approval_audit,
    approval_refusal,
    record_approval,
    signature_refusal,
)
from tempoconf.rollout.commands import COMMANDS, CommandName, OperatorCommand
from tempoconf.rollout.digest import plan_digest
from tempoconf.rollout.plan import PlannedStage, RolloutPlan
from tempoconf.rollout.progress import (
    FINAL_STATES,
    NOTE,
    TRANSITION,
    HealthReport,
    Outcome,
    RolloutProgress,
    RolloutState,
    StageProgress,
    StageStatus,
    Transition,
    TransitionKind,
    Verdict,
    anything_published,
    describe_phase,
    stays_on,
)
from tempoconf.rollout.refusals import APPLY_GATE_STATES, update_refusal
from tempoconf.rollout.signatures import take_nonce

__all__ = [
    "APPLY_GATE_STATES",
    "DEFAULT_OPERATOR",
    "LEASE_RENEWAL_FRACTION",
    "Effect",
    "RolloutRunState",
    "StageStep",
    "count_failures",
]

# Who a signal or update came from when it does not say (signals carry no identity).
DEFAULT_OPERATOR = "operator"
# Where `advance` passes a stage's gate on applied versions as it is.
# Leases are renewed when half of the shortest one has passed, so one missed renewal never lapses them.
LEASE_RENEWAL_FRACTION = 0.5


class StageStep(StrEnum):
    """Where in its current stage a rollout is, in order: a run continued as new resumes there."""

    PUBLISH = "publish"
    HOLD = "hold"
    APPLY = "apply"
    """The gate on applied versions (a stage with `min_applied`), after the hold."""
    CHECK = "check"
    APPROVAL = "approval"
    SETTLE = "settle"
    """The stage passed; the rollout leaves it once it is not paused."""


def count_failures(
    stage: PlannedStage, report: HealthReport, failures: dict[int, int]
) -> list[str]:
    """Count each check's failures in a row into `failures` (a pass resets it, no data leaves it);
    the checks that reached their `failure_limit`, described."""
    tripped = []
    for result in report.checks:
        if result.verdict == Verdict.UNHEALTHY:
            failures[result.index] = failures.get(result.index, 0) + 1
            limit = stage.health[result.index].failure_limit
            if failures[result.index] >= limit:
                count = f" ({failures[result.index]} failures in a row)" if limit > 1 else ""
                tripped.append(f"{result.name}: {result.summary}{count}")
        elif result.verdict == Verdict.HEALTHY:
            failures[result.index] = 0
    return tripped


@dataclass(frozen=True)
class Effect:
    """What an operator command did: the reply once the rollout acted on it, and while it has not yet."""

    accepted: bool
    done: str
    requested: str = ""


@dataclass
class RolloutRunState:
    """Everything one run of a rollout knows; `progress` is what the `status` query returns."""

    progress: RolloutProgress
    plan: RolloutPlan | None = None
    halt: OperatorCommand | None = None
    """A halt an operator asked for, acted on once the current step ends."""
    bypass: OperatorCommand | None = None
    advance_requested: bool = False
    """The current hold was asked to end early."""
    failures: dict[int, int] = field(default_factory=dict)
    """Check index → failures in a row, for the current stage."""
    leases: dict[int, float] = field(default_factory=dict)
    """Stage index → lease length in seconds, for every live stage."""
    leases_renewed_at: datetime | None = None
    audited_transitions: int = 0
    """History rows up to here are in the audit log (or are written by the activity that caused them)."""
    unaudited: list[int] = field(default_factory=list)
    """History rows the audit must skip: the promote or revert activity wrote them itself."""
    search_attributes: dict[str, str] = field(default_factory=dict)
    """Search attribute name → the value last upserted (each upsert is a history event)."""
    deliveries_started: int = 0
    """Webhook deliveries started so far: numbers each event's idempotency id."""
    step: StageStep | None = None
    """The step of the current stage the rollout is in (None: before the first stage)."""
    health_watch_since: str | None = None
    """While the hold's interval checks run in their activity: since when (ISO 8601)."""
    runs: int = 1
    """Runs of this rollout so far: each continue-as-new starts one more, carrying this state."""
    pending_paths: list[str] = field(default_factory=list)
    """`TempoconfPaths` to upsert with the next upsert (set once, after prepare, where the
    namespace has that attribute), then empty."""
    approval_nonces: dict[str, str] = field(default_factory=dict)
    """Nonce → signed_at of each bound signed approval taken (tempoconf.rollout.signatures):
    each is taken once. Kept while its signature is fresh; an older one is refused as stale."""
    four_eyes_normalised: bool = False
    """Four eyes compare people as tempoconf.rollout.identities says (patch
    `four-eyes-normalised-identities`); False: a run started before, judged as it was then."""

    @classmethod
    def start(cls, request: Any, *, workflow_id: str) -> RolloutRunState:
        """The state before prepare: the namespace and path as the raw request gives them."""
        raw = request if isinstance(request, dict) else {}
        namespace = raw.get("namespace") or "default"
        changes = raw.get("changes")
        if (
            "path" not in raw
            and isinstance(changes, list)
            and changes
            and isinstance(changes[0], dict)
        ):
            # A changeset is named by its first config (tempoconf.rollout.changesets).
            namespace = changes[0].get("namespace") or namespace
            raw = changes[0]
        return cls(
            RolloutProgress(
                workflow_id=workflow_id,
                namespace=str(namespace),
                path=str(raw.get("path") or ""),
            )
        )

    # -- approvals that hold ------------------------------------------------------------------
    def bind_approvals(self, rollout_run: str) -> None:
        """Signed approvals of this rollout name `rollout_run` (its first run's id), the stage
        and a nonce (patch `approvals-bound-to-run-and-stage`); continue-as-new carries it."""
        self.progress.approval_run = rollout_run

    # -- plan and stages ----------------------------------------------------------------------
    def set_plan(self, plan: RolloutPlan, *, change_texts_in_digest: bool = False) -> None:
        """The plan prepare returned (tempoconf.rollout.plan.plan_from_request, as every door builds it).
        `change_texts_in_digest`: the digest as a changeset had it before issue 25, for a run
        that predates it (tempoconf.rollout.digest)."""
        self.plan = plan
        self.progress.version = plan.version
        self.progress.author = plan.author
        self.progress.signed_approvals = bool(plan.approval_key)
        self.progress.changes = (
            [f"{namespace}/{path} {version}" for namespace, path, version in plan.configs()]
            if plan.changes
            else []
        )
        self.progress.change_summaries = [change.change for change in plan.changes]
        self.progress.stage_count = len(plan.stages)
        self.progress.stages = [
            StageProgress(
                index=stage.index,
                name=stage.name,
                cohort=stage.cohort(),
                cooldown_seconds=stage.cooldown_seconds,
                manual=stage.manual,
                approvals_required=stage.approvals.required if stage.approvals else 0,
                approvals_forbid_author=bool(stage.approvals and stage.approvals.forbid_author),
            )
            for stage in plan.stages
        ]
        # A pure function of the plan (as prepare returned it): the same on every replay.
        self.progress.digest = plan_digest(plan, change_texts=change_texts_in_digest)

    def enter_stage(self, stage: PlannedStage) -> None:
        """The rollout moves to `stage` (it is about to be published)."""
        self.progress.stage_index = stage.index
        self.progress.stage_name = stage.name
        self.progress.approved = False
        self.progress.approvals = []
        self.progress.applied = None

    def stage_published(
        self, stage: PlannedStage, *, published_at: str, expires_at: str, now: datetime
    ) -> None:
        """`stage` is live: its lease is renewed from now on."""
        self.lease_published(stage, now=now)
        live = self.progress.stages[stage.index]
        live.status = StageStatus.LIVE
        live.published_at = published_at
        live.expires_at = expires_at
        self.progress.stage_started_at = now.isoformat()

    def start_hold(self, stage: PlannedStage, *, deadline: datetime) -> None:
        """A hold of `stage` starts: no advance asked for yet, no check has failed yet."""
        self.advance_requested = False
        self.failures = {index: 0 for index in range(len(stage.health))}
        self.progress.hold_deadline = deadline.isoformat()
        self.progress.stages[stage.index].hold_deadline = self.progress.hold_deadline

    def promotion(self, *, system_actor: str) -> tuple[str, str]:
        """Who promotes the version, and why: the bypass's operator, else the rollout itself."""
        if self.bypass:
            return (
                self.bypass.by or DEFAULT_OPERATOR,
                f"bypassed: {self.bypass.reason or 'no reason given'}",
            )
        if self.plan is not None and self.plan.stages:
            return system_actor, "every stage passed its hold and checks"
        return system_actor, "no stages: promoted directly"

    def finish(self, outcome: Outcome, reason: str, *, stable_version: str | None) -> None:
        """The rollout ends with `outcome`; every client is on `stable_version` (None: on none, 404)."""
        promoted = outcome in (Outcome.PROMOTED, Outcome.BYPASSED)
        self.end_live_stages(StageStatus.PASSED if promoted else StageStatus.REVERTED)
        self.progress.outcome = outcome
        self.progress.reason = reason
        self.progress.stable_version = stable_version

    def mark_stage(self, index: int, status: StageStatus) -> None:
        if 0 <= index < len(self.progress.stages):
            self.progress.stages[index].status = status

    def end_live_stages(self, status: StageStatus) -> None:
        """The rollout ended: its live stages are now `status` (passed once promoted, else reverted)."""
        self.leases.clear()
        for stage in self.progress.stages:
            if stage.status == StageStatus.LIVE:
                stage.status = status

    def stage_label(self) -> str:
        progress = self.progress
        if progress.stage_name is None:
            return "the first stage"
        return f"stage {progress.stage_index + 1}/{progress.stage_count} {progress.stage_name}"

    # -- states and history -------------------------------------------------------------------
    def ended(self) -> bool:
        return RolloutState(self.progress.state) in FINAL_STATES

    def is_final_or_promoting(self) -> bool:
        state = RolloutState(self.progress.state)
        return state in FINAL_STATES or state in (RolloutState.PROMOTING, RolloutState.REVERTING)

    def transition(
        self, to_state: RolloutState, by: str, reason: str, *, at: str, audit: bool = True
    ) -> None:
        """Move to a named state, recording who and why. `audit=False`: the activity that made it
        happen (promote, revert) writes it to the audit log, so the workflow must not write it twice."""
        if not audit:
            self.unaudited.append(len(self.progress.history))
        # A "transition" to the state it is in would read as a change that did not happen.
        kind = NOTE if to_state == self.progress.state else TRANSITION
        self._record(to_state, by, reason, kind, at=at)

    def note(self, by: str, reason: str, *, at: str, details: dict[str, Any] | None = None) -> None:
        """Record an operator command that does not change the state (pause, approve, ...);
        `details` go into its audit row."""
        self._record(self.progress.state, by, reason, NOTE, at=at, details=details)

    def _record(
        self,
        to_state: RolloutState,
        by: str,
        reason: str,
        kind: TransitionKind,
        *,
        at: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        progress = self.progress
        progress.history.append(
            Transition(
                at=at,
                from_state=progress.state,
                to_state=to_state,
                by=by or DEFAULT_OPERATOR,
                reason=reason,
                stage=progress.stage_name,
                kind=kind,
                details=details or {},
            )
        )
        progress.state = to_state
        self.refresh()

    def refresh(self) -> None:
        """Derive what is derived: `paused` from the pause reasons, the phase from the state."""
        self.progress.paused = bool(self.progress.pause_reasons)
        self.progress.phase = describe_phase(self.progress)

    # -- audit log ----------------------------------------------------------------------------
    def has_unaudited(self) -> bool:
        return bool(self.progress.path) and self.audited_transitions < len(self.progress.history)

    def take_unaudited(self) -> list[int]:
        """The history rows to write to the audit log now (their sequence numbers), marked written."""
        history = self.progress.history
        if self.audited_transitions >= len(history) or not self.progress.path:
            return []
        first = self.audited_transitions
        self.audited_transitions = len(history)
        skipped = set(self.unaudited)
        return [seq for seq in range(first, len(history)) if seq not in skipped]

    # -- search attributes --------------------------------------------------------------------
    def search_attribute_changes(self, wanted: Mapping[str, str | None]) -> dict[str, str]:
        """Of `wanted` (name → value), those set and not yet upserted with that value; remembered."""
        changes = {
            name: value
            for name, value in wanted.items()
            if value and self.search_attributes.get(name) != value
        }
        self.search_attributes.update(changes)
        return changes

    # -- leases -------------------------------------------------------------------------------
    def lease_published(self, stage: PlannedStage, *, now: datetime) -> None:
        self.leases[stage.index] = stage.expiration_seconds
        if self.leases_renewed_at is None:
            self.leases_renewed_at = now

    def next_lease_renewal(self) -> datetime | None:
        if not self.leases or self.leases_renewed_at is None:
            return None
        shortest = min(self.leases.values())
        return self.leases_renewed_at + timedelta(seconds=shortest * LEASE_RENEWAL_FRACTION)

    def leases_renewed(self, expires_at: Mapping[int, str], *, now: datetime) -> None:
        self.leases_renewed_at = now
        for index, expiry in expires_at.items():
            self.progress.stages[int(index)].expires_at = expiry

    # -- health -------------------------------------------------------------------------------
    def count_failures(self, stage: PlannedStage, report: HealthReport) -> list[str]:
        """Count each check's failures in a row (a pass resets it); the checks that reached their
        `failure_limit`, described."""
        return count_failures(stage, report, self.failures)

    # -- webhooks -----------------------------------------------------------------------------
    def webhook_body(self, event: str, reason: str, *, run_id: str, at: str) -> dict[str, Any]:
        """The JSON every webhook URL gets for `event`; its `id` is the same for each URL."""
        progress = self.progress
        return {
            "id": f"{run_id}:{self.deliveries_started}",
            "event": event,
            "workflow_id": progress.workflow_id,
            "namespace": progress.namespace,
            "path": progress.path,
            "version": progress.version,
            "state": progress.state,
            "stage": progress.stage_name,
            "stage_index": progress.stage_index,
            "reason": reason,
            "at": at,
        }

    # -- operator commands --------------------------------------------------------------------
    def _ignored(self, by: str, why: str, *, at: str) -> Effect:
        """A command that changes nothing: signals cannot be refused, so the history says why."""
        self.note(by, why, at=at)
        return Effect(False, why)

    def _requested(
        self, name: CommandName, command: OperatorCommand, by: str, *, at: str
    ) -> OperatorCommand:
        """A halt or bypass, noted now; what to keep until it is acted on (the current step ends)."""
        self.note(by, f"{name} requested: {command.reason or 'no reason given'}", at=at)
        return OperatorCommand(reason=command.reason, by=by)

    def apply_halt(self, command: OperatorCommand, *, at: str) -> Effect:
        by = command.by or DEFAULT_OPERATOR
        if self.halt is not None:
            return self._ignored(
                by, "a halt was already requested: the rollout is reverting", at=at
            )
        if self.is_final_or_promoting():
            return self._ignored(
                by, f"halt ignored: the rollout is already {self.progress.state}", at=at
            )
        self.halt = self._requested(CommandName.HALT, command, by, at=at)
        # What it reverts is known once it ended (answer_message): a publish under way now
        # still completes first.
        publishing = self.progress.state == RolloutState.PUBLISHING
        if anything_published(self.progress) or publishing:
            requested = "the live stages are reverted once the current step ends"
        else:
            requested = "the rollout ends once the current step ends (nothing is published yet)"
        return Effect(
            True, "halted: the live stages were reverted", f"requested: halt; {requested}"
        )

    def apply_bypass(self, command: OperatorCommand, *, at: str) -> Effect:
        by = command.by or DEFAULT_OPERATOR
        if self.bypass is not None:
            return self._ignored(
                by, "a bypass was already requested: the version is being promoted", at=at
            )
        if self.halt is not None:
            return self._ignored(by, "bypass ignored: the rollout is being halted", at=at)
        if self.is_final_or_promoting():
            return self._ignored(
                by, f"bypass ignored: the rollout is already {self.progress.state}", at=at
            )
        self.bypass = self._requested(CommandName.BYPASS, command, by, at=at)
        version = self.progress.version or "the version"
        return Effect(
            True,
            f"bypassed: {version} was promoted to stable",
            f"requested: bypass; {version} is promoted once the current step ends",
        )

    def apply_advance(self, command: OperatorCommand, *, at: str) -> Effect:
        by = command.by or DEFAULT_OPERATOR
        if RolloutState(self.progress.state) in APPLY_GATE_STATES:
            return self._advance_past_apply_gate(by, command, at=at)
        if self.progress.state != RolloutState.HOLDING or self.progress.hold_deadline is None:
            return self._ignored(
                by,
                f"advance ignored: no hold is running (the rollout is {self.progress.state})",
                at=at,
            )
        stage = self.stage_label()
        self.advance_requested = True
        self.note(by, f"advance: hold ended early ({command.reason or 'no reason'})", at=at)
        return Effect(
            True,
            f"the hold of {stage} ended early",
            f"requested: the hold of {stage} ends early; the rollout moves on once the current step ends",
        )

    def _advance_past_apply_gate(self, by: str, command: OperatorCommand, *, at: str) -> Effect:
        """`advance` while the stage waits for its clients to apply: the gate is passed as is."""
        stage = self.stage_label()
        self.advance_requested = True
        self.note(
            by,
            f"advance: apply gate passed by an operator ({command.reason or 'no reason'})",
            at=at,
        )
        return Effect(
            True,
            f"the apply gate of {stage} was passed",
            f"requested: the apply gate of {stage} is passed; the rollout moves on once the "
            "current step ends",
        )

    def start_apply_gate(self) -> None:
        """The stage's gate on applied versions starts: an advance that ended its hold does not
        pass the gate too."""
        self.advance_requested = False

    def apply_pause(self, command: OperatorCommand, *, at: str) -> Effect:
        by = command.by or DEFAULT_OPERATOR
        if self.is_final_or_promoting():
            return self._ignored(
                by, f"pause ignored: the rollout is already {self.progress.state}", at=at
            )
        self.progress.pause_reasons.append(command.reason or f"paused by {by}")
        self.note(by, f"pause: {command.reason or 'no reason given'}", at=at)
        done = f"paused at {self.stage_label()}: the rollout does not leave it until resume"
        return Effect(True, done, done)

    def apply_resume(self, command: OperatorCommand, *, at: str) -> Effect:
        by = command.by or DEFAULT_OPERATOR
        if not self.progress.pause_reasons:
            return self._ignored(by, "resume ignored: the rollout is not paused", at=at)
        self.progress.pause_reasons.clear()
        self.note(by, f"resume: {command.reason or 'no reason given'}", at=at)
        return Effect(
            True, "resumed", "requested: resume; the rollout moves on once the current step ends"
        )

    def apply_approve(self, command: OperatorCommand, *, at: str) -> Effect:
        by = command.by or DEFAULT_OPERATOR
        progress = self.progress
        paused = "; ".join(progress.pause_reasons)
        if progress.state != RolloutState.AWAITING_APPROVAL:
            return self._ignored(by, "approve ignored: nothing is waiting for approval", at=at)
        if progress.approved:
            held = f", held until resume (paused: {paused})" if paused else ""
            return self._ignored(by, f"{progress.stage_name} is already approved{held}", at=at)
        refused = approval_refusal(
            self.plan, progress, command, normalised=self.four_eyes_normalised
        )
        if refused is not None:
            # A stale digest or a second approval by one identity changes nothing (an update's
            # validator refused it).
            return self._ignored(by, refused.replace("cannot approve", "approve ignored", 1), at=at)
        approved, text = record_approval(self.plan, progress, command, at=at)
        # Before record_approval, which may not move the stage but names it as it is now.
        audit = {"approval": approval_audit(self.plan, progress, command, by)}
        if not approved:
            waiting = f"{text}; waiting for more approvals"
            self.note(by, text, at=at, details=audit)
            return Effect(True, waiting, waiting)
        progress.approved = True
        if paused:
            # The approval counts, but a paused rollout does not leave its stage: say so.
            held = f"approval of {progress.stage_name} accepted and held until resume (paused: {paused})"
            self.note(by, f"{text}; held until resume (paused: {paused})", at=at, details=audit)
            return Effect(True, held, held)
        self.note(by, text, at=at, details=audit)
        return Effect(
            True,
            f"approved {progress.stage_name}",
            f"requested: approve {progress.stage_name}; the rollout moves on once the current step ends",
        )

    def answer_message(self, command: CommandName, effect: Effect) -> str:
        """What an update that took effect answers: its effect, except that a halt of a rollout
        that ended having published nothing says so (it reverted no stage)."""
        if (
            command == CommandName.HALT
            and effect.accepted
            and self.ended()
            and not anything_published(self.progress)
        ):
            return f"halted: nothing was published; {stays_on(self.progress)}"
        return effect.done

    def apply(self, command: CommandName, argument: OperatorCommand, *, at: str) -> Effect:
        """Act on an operator command (a signal, or an update its validator accepted)."""
        now = datetime.fromisoformat(at)
        unsigned = signature_refusal(
            self.plan,
            self.progress,
            command,
            argument,
            now=now,
            used_nonces=self.approval_nonces,
        )
        if unsigned is not None:
            # A signal cannot be refused: one the API did not sign changes nothing, noted.
            why = unsigned.replace(f"cannot {command}", f"{command} ignored", 1)
            return self._ignored(argument.by or DEFAULT_OPERATOR, why, at=at)
        signed = COMMANDS[command].signed and command != CommandName.HALT
        if signed and self.progress.approval_run and self.plan and self.plan.approval_key:
            # Taken whatever the approval then does: a replay of it is refused as a replay.
            take_nonce(self.approval_nonces, argument.nonce, argument.signed_at, now=now)
        apply = {
            CommandName.HALT: self.apply_halt,
            CommandName.BYPASS: self.apply_bypass,
            CommandName.ADVANCE: self.apply_advance,
            CommandName.PAUSE: self.apply_pause,
            CommandName.RESUME: self.apply_resume,
            CommandName.APPROVE: self.apply_approve,
        }[command]
        return apply(argument, at=at)

    def refusal(
        self,
        command: CommandName,
        argument: OperatorCommand | None = None,
        *,
        now: datetime | None = None,
    ) -> str | None:
        """Why an update `command` is refused before it is written to history; None: accepted
        (tempoconf.rollout.refusals)."""
        return update_refusal(self, command, argument, now=now)
