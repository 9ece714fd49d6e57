"""The validated, normalized rollout as the workflow runs it.

Plain dataclasses of JSON-friendly fields, so they cross the Temporal boundary with the default
converter and are safe to import in the workflow sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter

from tempoconf.canonical import version_id
from tempoconf.gates.applied_gate import DEFAULT_APPLIED_WINDOW_SECONDS
from tempoconf.gates.windows import ChangeWindow, window_from_spec
from tempoconf.rollout.changesets import changeset_key
from tempoconf.rollout.health_specs import (
    HealthCheckSpec,
    HttpCheckSpec,
    PrometheusCheckSpec,
    ReportsCheckSpec,
)
from tempoconf.rollout.request import RolloutRequest

__all__ = [
    "DEFAULT_CHECK_TIMEOUT_SECONDS",
    "CheckKind",
    "CheckSpec",
    "NoDataPolicy",
    "PlannedApprovals",
    "PlannedChange",
    "PlannedCheck",
    "PlannedStage",
    "RolloutPlan",
    "added_reach",
    "plan_check",
    "plan_from_request",
    "planned_changes",
]

CheckSpec = ReportsCheckSpec | PrometheusCheckSpec | HttpCheckSpec
"""A health check's typed spec, one model per kind."""
DEFAULT_CHECK_TIMEOUT_SECONDS = 30.0
"""How long one attempt of a check without a `timeout` of its own (reports: a store read) may take."""
_CHECK_ADAPTER: TypeAdapter[CheckSpec] = TypeAdapter(HealthCheckSpec)


class CheckKind(StrEnum):
    REPORTS = "reports"
    PROMETHEUS = "prometheus"
    HTTP = "http"


class NoDataPolicy(StrEnum):
    """What a check with no data concludes at the end of the hold."""

    PASS = "pass"
    FAIL = "fail"


@dataclass
class PlannedCheck:
    """A health check as the rollout runs it: every default applied, its timing in seconds."""

    kind: CheckKind
    name: str
    """For people: the check's own name, else one made of its kind (and bound, or URL)."""
    interval_seconds: float | None = None
    """Also run during the hold, this often; None: only at the hold's end."""
    initial_delay_seconds: float = 0.0
    failure_limit: int = 1
    """Failures in a row that make the stage unhealthy."""
    on_no_data: NoDataPolicy = NoDataPolicy.FAIL
    attempts: int = 3
    """Tries against an unreachable source before the check counts as failed."""
    timeout_seconds: float = DEFAULT_CHECK_TIMEOUT_SECONDS
    """How long one attempt may take."""
    max_extension_seconds: float | None = None
    """A judged check (`judge.sequential`) with `on_inconclusive: extend`: how long the hold goes
    on past its end while the check is inconclusive; None: it never extends the hold."""
    spec: dict[str, Any] = field(default_factory=dict)
    """The check as the request gave it, as JSON (durations in seconds; unset fields left out)."""

    def typed_spec(self) -> CheckSpec:
        """The kind's own model (raises pydantic's ValidationError if `spec` is not a valid check)."""
        return _CHECK_ADAPTER.validate_python(self.spec)

    def seconds_per_run(self) -> float:
        """The longest one run of the check can take: every attempt, and the pauses between them."""
        return self.timeout_seconds * self.attempts + 2.0 * self.attempts


def plan_check(spec: CheckSpec | Mapping[str, Any], index: int) -> PlannedCheck:
    """`spec` (typed, or as JSON) planned as the `index`-th check of its stage."""
    typed = (
        spec
        if isinstance(spec, ReportsCheckSpec | PrometheusCheckSpec | HttpCheckSpec)
        else (_CHECK_ADAPTER.validate_python(spec))
    )
    timeout = getattr(typed, "timeout", None)
    return PlannedCheck(
        kind=CheckKind(typed.kind),
        name=_check_name(typed, index),
        interval_seconds=typed.interval.total_seconds() if typed.interval is not None else None,
        initial_delay_seconds=typed.initial_delay.total_seconds(),
        failure_limit=typed.failure_limit,
        on_no_data=NoDataPolicy(typed.on_no_data),
        attempts=typed.attempts,
        # `or`: a zero timeout leaves the attempt its default budget, as before checks were typed
        timeout_seconds=(timeout.total_seconds() if timeout is not None else 0.0)
        or DEFAULT_CHECK_TIMEOUT_SECONDS,
        max_extension_seconds=_max_extension_seconds(typed),
        # dumped anew for each stage: no check dict is shared between two stages
        spec=typed.model_dump(mode="json", exclude_none=True),
    )


def _max_extension_seconds(spec: CheckSpec) -> float | None:
    judge = getattr(spec, "judge", None)
    if judge is None or judge.sequential.on_inconclusive != "extend":
        return None
    return float(judge.sequential.max_extension.total_seconds())


def _check_name(spec: CheckSpec, index: int) -> str:
    if spec.name:
        return spec.name
    if isinstance(spec, HttpCheckSpec):
        return f"http {spec.url}"
    if isinstance(spec, PrometheusCheckSpec):
        if spec.judge is not None:
            tolerance = spec.judge.sequential.max_increase * 100
            return f"prometheus #{index + 1} (sequential, max_increase {tolerance:g} pp)"
        bound = f"<= {spec.max:g}" if spec.max is not None else f">= {spec.min or 0:g}"
        return f"prometheus #{index + 1} ({bound})"
    return f"reports #{index + 1}"


@dataclass
class PlannedApprovals:
    """Four eyes on a manual stage (the request's `approvals`; tempoconf.rollout.approvals)."""

    required: int
    forbid_author: bool = True


@dataclass
class PlannedStage:
    index: int
    name: str
    channel: str | None = None
    percentile: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    cooldown_seconds: float = 300.0
    expiration_seconds: float = 3600.0
    manual: bool = False
    health: list[PlannedCheck] = field(default_factory=list)
    """Checks of this stage: the rollout's `health` plus the stage's own."""
    approvals: PlannedApprovals | None = None
    """Approvals from distinct identities it needs (None: one `approve`, if `manual`)."""
    min_applied: float | None = None
    """Gate on applied versions (tempoconf.gates.applied_gate): None, no gate."""
    applied_window_seconds: float = DEFAULT_APPLIED_WINDOW_SECONDS
    apply_timeout_seconds: float | None = None
    on_apply_timeout: str = "revert"
    """`revert` or `hold`, once `apply_timeout` passes with `min_applied` unmet."""

    def seconds_per_check_run(self, indices: list[int]) -> float:
        """The longest a run of these checks can take (they run concurrently): the slowest one's."""
        return max(self.health[index].seconds_per_run() for index in indices)

    def cohort(self) -> str:
        """Who this stage reaches, in words."""
        parts = []
        if self.channel is not None:
            parts.append(f"channel={self.channel}")
        if self.percentile is not None:
            parts.append(f"{self.percentile:g}% of clients")
        if self.labels:
            parts.append(", ".join(f"{key}={value}" for key, value in sorted(self.labels.items())))
        return " and ".join(parts)


def added_reach(stages: list[PlannedStage], index: int) -> str:
    """What stage `index` adds to the stages before it (cohorts are cumulative), in words, as far
    as it is known without the fleet: the share of its segment (its channel and labels) above the
    largest percentile an earlier stage of the same segment reached, less what earlier stages of
    other segments may reach among them (how many, only the clients known to a plan say)."""
    stage = stages[index]
    labels = ", ".join(f"{key}={value}" for key, value in sorted(stage.labels.items()))
    channel = f"channel={stage.channel}" if stage.channel is not None else ""
    segment = " and ".join(part for part in (channel, labels) if part)
    earlier = stages[:index]
    same = [
        other
        for other in earlier
        if other.channel == stage.channel and other.labels == stage.labels
    ]
    below = max((_share(other) for other in same), default=0.0)
    added = round(_share(stage) - below, 2)
    if added <= 0:
        return "no client"
    of = f"of the clients with {segment}" if segment else "of the clients"
    text = f"all {of[3:]}" if added == 100 else f"{added:g}% {of}"
    if any(_may_overlap(other, stage) for other in earlier if other not in same):
        text += ", less those earlier stages reach"
    return text


def _share(stage: PlannedStage) -> float:
    return 100.0 if stage.percentile is None else stage.percentile


def _may_overlap(one: PlannedStage, other: PlannedStage) -> bool:
    """Whether some client could match both: not when they name different channels, or
    different values of one label."""
    if one.channel is not None and other.channel is not None and one.channel != other.channel:
        return False
    return all(other.labels.get(key, value) == value for key, value in one.labels.items())


@dataclass
class PlannedChange:
    """One config of a changeset and the version it moves to."""

    namespace: str
    path: str
    version: str
    change: str = ""
    """What it changes, for people (tempoconf.rollout.change)."""


@dataclass
class RolloutPlan:
    namespace: str
    path: str
    version: str
    """The config and version (a changeset's: its first change's)."""
    stages: list[PlannedStage] = field(default_factory=list)
    author: str = ""
    commit: str = ""
    message: str = ""
    started_by: str = ""
    """Who started it, verified (tempoconf.rollout.request); "" when no one was."""
    started_by_emails: list[str] = field(default_factory=list)
    """The emails the API vouched for with `started_by` (tempoconf.rollout.identities)."""
    approval_key: str = ""
    """The public key an `approve` must be signed with (tempoconf.rollout.signatures); "": none."""
    webhooks: list[str] = field(default_factory=list)
    change: str = ""
    """What the rollout changes, for people (`max_connections 1000 → 2000`; tempoconf.rollout.change)."""
    temporal_cli: str = ""
    """How to type the Temporal CLI where the worker runs (`.venv/bin/temporal`; "" means `temporal`)."""
    temporal_address: str = ""
    """host:port of the Temporal server the worker uses, so printed commands run as printed."""
    temporal_namespace: str = ""
    """The Temporal namespace of the workflow ("" when unknown; "default" is not printed)."""
    continue_as_new_after_events: int = 0
    """A worker's setting: continue as new once a run's history is this long (0: only when the
    server suggests it, at a few thousand events)."""
    changes: list[PlannedChange] = field(default_factory=list)
    """A changeset's configs, in the request's order (the first is `namespace`/`path`/`version`
    above); empty for a single config. Stages, holds and checks are the same for all of them."""
    bucket_key: str | None = None
    """What percentile stages bucket by: a changeset's key (tempoconf.rollout.changesets); None: the path."""
    paths_attribute: bool = False
    """A worker's finding: the namespace has the `TempoconfPaths` search attribute, so the
    workflow may upsert it (an unregistered one would fail its task forever)."""

    def configs(self) -> list[tuple[str, str, str]]:
        """(namespace, path, version) of every config the rollout changes."""
        if self.changes:
            return [(change.namespace, change.path, change.version) for change in self.changes]
        return [(self.namespace, self.path, self.version)]

    def paths(self) -> list[str]:
        """The path of every config the rollout changes, in order (`TempoconfPaths`)."""
        return [path for _, path, _ in self.configs()]

    # Change windows and freezes (tempoconf.gates.windows, tempoconf.gates.freezes); empty: no gate.
    windows: list[ChangeWindow] = field(default_factory=list)
    """Stages are published and the version promoted only inside one of these."""
    override_freeze: str | None = None
    """The reason this rollout may pass a freeze of its namespace; None: it waits one out."""
    rollback: bool = False
    """A rollout of a version the config already has (`version`): freezes never hold it."""


def planned_changes(request: RolloutRequest) -> list[PlannedChange]:
    """A changeset's configs and the version each moves to, in the request's order ([] for a
    single config): a change's `version`, else its value's id, as validation makes them."""
    return [
        PlannedChange(
            namespace=request.change_namespace(change),
            path=change.path,
            version=change.version if change.version is not None else version_id(change.value),
        )
        for change in request.changes or []
    ]


def plan_from_request(request: RolloutRequest, version: str) -> RolloutPlan:
    """The plan of `request` rolling out `version` (a changeset's: its first change's): defaults
    applied, names given, rollout-level checks in every stage, a changeset's configs and bucketing
    key. The one function every door builds a plan with (the prepare step, `rollout plan` and
    `POST /v1/admin/plans`), so each shows the digest (tempoconf.rollout.digest) the rollout requires."""

    def checks(stage_checks: list[CheckSpec] | None) -> list[PlannedCheck]:
        return [
            plan_check(check, index)
            for index, check in enumerate([*request.health, *(stage_checks or [])])
        ]

    stages = [
        PlannedStage(
            index=index,
            name=spec.display_name,
            channel=spec.channel,
            percentile=spec.percentile,
            labels=dict(spec.labels or {}),
            # `is None`, not `or`: an explicit zero cooldown means no hold, not the default
            cooldown_seconds=(
                spec.cooldown if spec.cooldown is not None else request.default_cooldown_time
            ).total_seconds(),
            expiration_seconds=(
                spec.expiration if spec.expiration is not None else request.default_expiration_time
            ).total_seconds(),
            manual=spec.manual,
            health=checks(spec.health),
            approvals=(
                PlannedApprovals(spec.approvals.required, spec.approvals.forbid_author)
                if spec.approvals is not None
                else None
            ),
            min_applied=spec.min_applied,
            applied_window_seconds=(
                spec.applied_window.total_seconds()
                if spec.applied_window is not None
                else DEFAULT_APPLIED_WINDOW_SECONDS
            ),
            apply_timeout_seconds=(
                spec.apply_timeout.total_seconds() if spec.apply_timeout is not None else None
            ),
            on_apply_timeout=spec.on_apply_timeout or "revert",
        )
        for index, spec in enumerate(request.all_stages)
    ]
    changes = planned_changes(request)
    return RolloutPlan(
        namespace=request.namespace,
        path=request.path,
        version=version,
        changes=changes,
        bucket_key=(
            changeset_key((change.namespace, change.path) for change in changes)
            if changes
            else None
        ),
        stages=stages,
        author=request.author,
        commit=request.commit,
        message=request.message,
        started_by=request.started_by,
        started_by_emails=list(request.started_by_emails),
        approval_key=request.approval_key,
        webhooks=list(request.webhooks),
        windows=[window_from_spec(window) for window in request.windows],
        override_freeze=request.override_freeze.reason if request.override_freeze else None,
        rollback=request.version is not None,
    )
