"""The stages of a rollout request (docs/contract.md, Stages): whom each reaches, its hold and
lease, its checks, the approvals of a manual stage and its gate on applied versions."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Literal, Protocol

from pydantic import ConfigDict, Field, field_validator, model_validator

from tempoconf.rollout.health_specs import HealthCheckSpec
from tempoconf.rollout.spec_fields import Duration, StrictSpec, one_of, positive_duration

__all__ = [
    "MAX_APPROVALS",
    "MAX_STAGES",
    "ApprovalsSpec",
    "StageSpec",
    "cohort_contains",
    "stage_display_name",
    "unwidening_stages",
]

MAX_STAGES = 100
"""The most stages a request may have, its strategy's included."""


MAX_APPROVALS = 10
"""The most approvals a stage may require."""


class ApprovalsSpec(StrictSpec):
    """Four eyes on a manual stage: how many distinct identities must approve, and whether the
    request's author may be one of them."""

    required: int = Field(ge=1, le=MAX_APPROVALS, strict=True)
    """Approvals from distinct identities the stage needs before it advances."""
    forbid_author: bool = Field(default=True, strict=True)
    """The request's `author` may not approve (the request must then name its author)."""


_APPLIED_GATE_OPTIONS = ("applied_window", "apply_timeout", "on_apply_timeout")
"""Stage fields that only mean something with `min_applied`."""


class StageSpec(StrictSpec):
    """One stage: the clients it reaches (channel, percentile, labels: all must match) and its hold."""

    model_config = ConfigDict(
        json_schema_extra={
            **one_of("channel", "percentile", "labels"),
            "dependentRequired": {name: ["min_applied"] for name in _APPLIED_GATE_OPTIONS},
        }
    )

    channel: str | None = Field(default=None, min_length=1, max_length=100)
    """Matches clients whose channel is exactly this."""
    # strict: a boolean or a string is not a percentile (lax mode would read true as 1)
    percentile: float | None = Field(default=None, ge=0, le=100, strict=True)
    """Matches clients whose bucket is below round(percentile × 100); at most two decimals."""
    labels: dict[str, str] | None = None
    """Matches clients that carry every one of these labels."""
    cooldown: Duration | None = None
    """The hold before the stage may move on (default: the request's `default_cooldown_time`)."""
    expiration: Duration | None = None
    """The stage's lease (default: the request's `default_expiration_time`); greater than zero."""
    manual: bool = False
    """Once the hold and checks pass, wait for `approve`."""
    name: str | None = Field(default=None, min_length=1, max_length=100)
    """Default: from the target (`channel:canary`, `10%`, `labels:region=eu`, joined by spaces when
    a stage names several); unique in a request."""
    health: list[HealthCheckSpec] | None = None
    """Checks of this stage only, run after the request's."""
    approvals: ApprovalsSpec | None = None
    """Four eyes: the approvals a `manual` stage needs, each naming the plan's digest."""

    @model_validator(mode="after")
    def _approvals_are_manual(self) -> StageSpec:
        if self.approvals is not None and not self.manual:
            raise ValueError('approvals are given on a manual stage only: add "manual": true')
        return self

    # Gates on applied versions (tempoconf.gates.applied_gate): strict, as percentile (true is no ratio).
    min_applied: float | None = Field(default=None, gt=0, le=1, strict=True)
    """After the cooldown, hold until this share (0 < r <= 1) of the stage's cohort seen in the
    last `applied_window` reports the version applied."""
    applied_window: Duration | None = None
    """Clients seen (polling or reporting) this recently count for `min_applied`; default 10m."""
    apply_timeout: Duration | None = None
    """Counted from the stage's publish: once it passes with `min_applied` unmet,
    `on_apply_timeout` decides; default none (wait until met, advanced or halted)."""
    on_apply_timeout: Literal["revert", "hold"] | None = None
    """`revert` (the default): the rollout reverts, its reason the ratio and the stragglers count;
    `hold`: it stays in `apply_timed_out` until an operator sends `advance` (go on as is),
    `bypass` or `halt`."""

    @model_validator(mode="after")
    def _gate_options_need_min_applied(self) -> StageSpec:
        if self.min_applied is None:
            given = [name for name in _APPLIED_GATE_OPTIONS if name in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{', '.join(given)} only with min_applied (the share of the stage's cohort "
                    "that must report the version applied)"
                )
        return self

    @field_validator("percentile")
    @classmethod
    def _two_decimals(cls, value: float | None) -> float | None:
        if value is not None and Decimal(str(value)).as_tuple().exponent < -2:  # type: ignore[operator]
            raise ValueError(f"percentile has at most two decimals (got {value})")
        return value

    _positive_durations = field_validator("expiration", "applied_window", "apply_timeout")(
        positive_duration
    )

    @model_validator(mode="after")
    def _names_a_target(self) -> StageSpec:
        if self.channel is None and self.percentile is None and not self.labels:
            raise ValueError("a stage must name at least one of channel, percentile, labels")
        return self

    @property
    def display_name(self) -> str:
        return self.name or stage_display_name(self.channel, self.percentile, self.labels or {})


def stage_display_name(
    channel: str | None, percentile: float | None, labels: dict[str, str]
) -> str:
    """The default stage name: `channel:canary`, `10%`, `labels:region=eu`, joined by spaces."""
    parts = []
    if channel is not None:
        parts.append(f"channel:{channel}")
    if percentile is not None:
        parts.append(f"{percentile:g}%")
    if labels:
        parts.append(
            "labels:" + ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
        )
    return " ".join(parts)


class _Target(Protocol):
    """Whom a stage reaches: a StageSpec, or a PlannedStage (labels None or empty: none)."""

    @property
    def channel(self) -> str | None: ...

    @property
    def percentile(self) -> float | None: ...

    @property
    def labels(self) -> Mapping[str, str] | None: ...


def cohort_contains(outer: _Target, inner: _Target) -> bool:
    """Whether every client `inner` matches, `outer` matches too, whatever the fleet
    (tempoconf.resolution.stage_matches: channel AND percentile AND labels; no percentile is 100).
    Buckets are the same for both stages of one rollout, so a smaller percentile is a subset."""
    if outer.channel is not None and outer.channel != inner.channel:
        return False
    inner_labels = inner.labels or {}
    if any(inner_labels.get(key) != value for key, value in (outer.labels or {}).items()):
        return False
    outer_percentile = 100.0 if outer.percentile is None else outer.percentile
    inner_percentile = 100.0 if inner.percentile is None else inner.percentile
    return outer_percentile >= inner_percentile


def unwidening_stages(stages: list[StageSpec]) -> dict[int, int]:
    """Each stage (by index) that reaches no client an earlier stage does not reach already, and
    the first such earlier stage. Cohorts are cumulative (a client keeps the first stage it
    matches), so that stage would only hold and check the same clients again. Only a containment
    true for every fleet counts (`cohort_contains`)."""
    found = {}
    for index, stage in enumerate(stages):
        earlier = next(
            (i for i, other in enumerate(stages[:index]) if cohort_contains(other, stage)), None
        )
        if earlier is not None:
            found[index] = earlier
    return found
