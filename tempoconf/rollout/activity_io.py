"""Inputs and outputs of the rollout activities: one dataclass in, one out, named for what they carry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tempoconf.rollout.plan import PlannedStage, RolloutPlan
from tempoconf.rollout.progress import HealthReport, Transition

__all__ = [
    "CHECK_APPLIED_ACTIVITY",
    "CHECK_FREEZE_ACTIVITY",
    "CHECK_HEALTH_ACTIVITY",
    "INVALID_REQUEST_ERROR",
    "NOTIFY_ACTIVITY",
    "PREPARE_ACTIVITY",
    "PROMOTE_ACTIVITY",
    "PUBLISH_STAGE_ACTIVITY",
    "RECORD_TRANSITION_ACTIVITY",
    "RENEW_LEASES_ACTIVITY",
    "REVERT_ACTIVITY",
    "ROLLOUT_RUNNING_ERROR",
    "CheckAppliedInput",
    "CheckFreezeInput",
    "CheckFreezeResult",
    "CheckHealthInput",
    "NotifyInput",
    "PrepareInput",
    "PromoteInput",
    "PublishStageInput",
    "PublishStageResult",
    "RecordTransitionsInput",
    "RenewLeasesInput",
    "RenewLeasesResult",
    "RevertInput",
    "RevertResult",
    "WATCH_HEALTH_ACTIVITY",
    "WatchHealthInput",
    "WatchHealthProgress",
    "WatchHealthResult",
]


@dataclass
class PrepareInput:
    request: Any
    """The raw JSON as the user typed it (validated by the activity, so any shape is accepted)."""
    workflow_id: str
    run_id: str


@dataclass
class PublishStageInput:
    plan: RolloutPlan
    stage: PlannedStage
    workflow_id: str
    run_id: str
    actor: str = "workflow"


@dataclass
class PublishStageResult:
    expires_at: str
    published_at: str


@dataclass
class RenewLeasesInput:
    namespace: str
    path: str
    run_id: str
    expirations: dict[int, float] = field(default_factory=dict)
    """Stage index → lease length in seconds; each lease becomes now + length."""


@dataclass
class RenewLeasesResult:
    expires_at: dict[int, str] = field(default_factory=dict)


@dataclass
class CheckHealthInput:
    plan: RolloutPlan
    stage: PlannedStage
    final: bool
    """True at the end of the hold (the no-data policy decides), False for a check during it."""
    check_indices: list[int] | None = None
    """Which of the stage's checks to run; None: all of them."""
    published_at: str | None = None
    """When the stage was published (ISO 8601; PublishStageResult): evidence starts there."""
    extension_over: bool = False
    """The hold's extension (a sequential judge's `on_inconclusive: extend`) is over: what is
    still inconclusive is settled by `after_extension`."""


@dataclass
class WatchHealthInput:
    """The interval checks of one hold, run by one long-running activity beside the hold's timer."""

    plan: RolloutPlan
    stage: PlannedStage
    hold_seconds: float
    """How long the hold has left when the watch starts: the watch ends there by itself."""
    offset_seconds: float = 0.0
    """How far into the hold the watch starts (a run continued as new): `initial_delay` counts
    from the hold's start."""
    published_at: str | None = None
    failures: dict[int, int] = field(default_factory=dict)
    """Check index → failures in a row so far (carried from an earlier run of the rollout)."""


@dataclass
class WatchHealthProgress:
    """The watch's heartbeat details: a retried attempt (its worker was lost) resumes from them.
    `temporal workflow describe` shows them under the pending activity."""

    started_at: float
    """When the watch started, in seconds since the epoch on the watch's clock."""
    rounds: int = 0
    """Rounds of checks run so far."""
    failures: dict[int, int] = field(default_factory=dict)
    """Check index → failures in a row."""
    next_due: dict[int, float] = field(default_factory=dict)
    """Check index → when it runs next, in seconds after `started_at`."""
    last_report: HealthReport | None = None


@dataclass
class WatchHealthResult:
    """Why the watch ended by itself: a check reached its `failure_limit`, or the hold's time is up."""

    tripped: list[str] = field(default_factory=list)
    """The checks that reached their `failure_limit`, described; empty: the hold's time is up."""
    report: HealthReport | None = None
    """The last round's verdicts (None when no round ran)."""
    rounds: int = 0
    failures: dict[int, int] = field(default_factory=dict)


@dataclass
class RecordTransitionsInput:
    """Transitions to write to the audit log; sequence numbers make the writes idempotent."""

    namespace: str
    path: str
    workflow_id: str
    run_id: str
    version: str | None
    transitions: list[Transition] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)
    """Each transition's position in the workflow's history (its idempotency key)."""
    single_config: bool = False
    """The run's plan changes one config: the activity writes to it without asking the store which
    configs the run holds (False: it asks, as for a changeset or before the plan is known)."""


@dataclass
class NotifyInput:
    url: str
    body: dict[str, Any] = field(default_factory=dict)


@dataclass
class PromoteInput:
    plan: RolloutPlan
    workflow_id: str
    run_id: str
    actor: str
    reason: str


@dataclass
class RevertInput:
    namespace: str
    path: str
    workflow_id: str
    run_id: str
    outcome: str
    actor: str
    reason: str
    audit_always: bool = False
    """Audit `rollout.<outcome>` even when the run holds nothing (a failed prepare may have
    taken nothing, and its audit trail must still end with its outcome)."""


@dataclass
class RevertResult:
    stable_version: str | None
    """The config's stable version, which every client gets now; None: it has none (404)."""


# Activity names: the workflow refers to activities by name, so it never imports their code
# (which touches the store and the network) into the sandbox.
PREPARE_ACTIVITY = "prepare_rollout"
PUBLISH_STAGE_ACTIVITY = "publish_stage"
RENEW_LEASES_ACTIVITY = "renew_leases"
CHECK_HEALTH_ACTIVITY = "check_stage_health"
WATCH_HEALTH_ACTIVITY = "watch_stage_health"
RECORD_TRANSITION_ACTIVITY = "record_transition"
PROMOTE_ACTIVITY = "promote_version"
REVERT_ACTIVITY = "revert_rollout"

NOTIFY_ACTIVITY = "notify_webhook"
CHECK_FREEZE_ACTIVITY = "check_freeze"


@dataclass
class GatedConfig:
    """One config of a changeset, as the freeze gate sees it."""

    namespace: str
    path: str
    version: str


@dataclass
class CheckFreezeInput:
    """Before a stage is published (or the version promoted): is the namespace frozen?"""

    namespace: str
    path: str
    workflow_id: str
    run_id: str
    version: str | None
    step: str
    """What the rollout is about to do (`stage 2/3 10%`, `promote`): in the override's audit row."""
    step_key: str
    """The same, as the override's idempotency key (`stage:1`, `promote`)."""
    override_reason: str | None = None
    """The request's `override_freeze` reason: a freeze is passed, and audited, instead of waited out."""
    actor: str = ""
    """Who passes a freeze with the override (the request's author)."""
    configs: list[GatedConfig] = field(default_factory=list)
    """A changeset's configs: the namespace of each is looked at, and an override is audited in
    each config's log (empty: the one config above)."""


@dataclass
class CheckFreezeResult:
    frozen: bool
    """True: the rollout must wait (frozen, and no override)."""
    message: str = ""
    """`namespace N frozen by X since T: REASON, until U` ("" when not frozen)."""
    until: str | None = None
    """The freeze's `until` (ISO 8601), if it has one: the rollout looks again then at the latest."""
    overridden: bool = False
    """A freeze was active and the override passed it (an audit row says who and why)."""
    recheck_seconds: float = 30.0
    """While frozen: look again this soon at the latest (a worker setting), so an early
    `freeze end` is seen within it."""


# Error types the prepare activity raises (non-retryable) and the workflow passes on.
INVALID_REQUEST_ERROR = "InvalidRolloutRequest"
ROLLOUT_RUNNING_ERROR = "RolloutAlreadyRunning"


CHECK_APPLIED_ACTIVITY = "check_stage_applied"
"""Judges a stage's gate (activities/applied.py); it only reads the store."""


@dataclass
class CheckAppliedInput:
    """Which config, version and cohort the gate judges."""

    namespace: str
    path: str
    version: str
    stage: PlannedStage
    cohort: list[PlannedStage] = field(default_factory=list)
    """The live stages 1..k (tempoconf.rollout.health_verdicts.cohort_stages): whom the stage's
    version reaches."""
    configs: list[GatedConfig] = field(default_factory=list)
    """A changeset's configs, each judged on its own (empty: the one config above)."""
    bucket_key: str | None = None
    """What the cohort's percentile stages bucket by (a changeset's key; None: the path)."""
