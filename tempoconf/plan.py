"""The validated, normalized rollout as the workflow runs it.

Plain dataclasses of JSON-friendly fields, so they cross the Temporal boundary with the default
converter and are safe to import in the workflow sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tempoconf.request import RolloutRequest

__all__ = ["PlannedStage", "RolloutPlan", "plan_from_request"]


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
    health: list[dict[str, Any]] = field(default_factory=list)
    """Checks of this stage: the rollout's `health` plus the stage's own, as JSON."""

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


@dataclass
class RolloutPlan:
    namespace: str
    path: str
    version: str
    stages: list[PlannedStage] = field(default_factory=list)
    author: str = ""
    commit: str = ""
    message: str = ""
    webhooks: list[str] = field(default_factory=list)
    change: str = ""
    """What the rollout changes, for people (`max_connections 1000 → 2000`; tempoconf.change)."""
    temporal_cli: str = ""
    """How to type the Temporal CLI where the worker runs (`.venv/bin/temporal`; "" means `temporal`)."""
    temporal_address: str = ""
    """host:port of the Temporal server the worker uses, so printed commands run as printed."""
    temporal_namespace: str = ""
    """The Temporal namespace of the workflow ("" when unknown; "default" is not printed)."""


def plan_from_request(request: RolloutRequest, version: str) -> RolloutPlan:
    """The plan of `request`: defaults applied, names given, rollout-level checks in every stage."""

    def checks(stage_checks: list[Any] | None) -> list[dict[str, Any]]:
        # dumped anew for each stage: no check dict is shared between two stages
        return [
            check.model_dump(mode="json", exclude_none=True)
            for check in [*request.health, *(stage_checks or [])]
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
        )
        for index, spec in enumerate(request.all_stages)
    ]
    return RolloutPlan(
        namespace=request.namespace,
        path=request.path,
        version=version,
        stages=stages,
        author=request.author,
        commit=request.commit,
        message=request.message,
        webhooks=list(request.webhooks),
    )
