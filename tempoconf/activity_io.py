"""Inputs and outputs of the rollout activities: one dataclass in, one out, named for what they carry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tempoconf.plan import PlannedStage, RolloutPlan
from tempoconf.progress import Transition

__all__ = [
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
RECORD_TRANSITION_ACTIVITY = "record_transition"
PROMOTE_ACTIVITY = "promote_version"
REVERT_ACTIVITY = "revert_rollout"

NOTIFY_ACTIVITY = "notify_webhook"

# Error types the prepare activity raises (non-retryable) and the workflow passes on.
INVALID_REQUEST_ERROR = "InvalidRolloutRequest"
ROLLOUT_RUNNING_ERROR = "RolloutAlreadyRunning"
