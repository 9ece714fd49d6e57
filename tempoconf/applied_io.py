"""The activity of a stage's gate on applied versions, as the workflow calls it by name."""

from __future__ import annotations

from dataclasses import dataclass, field

from tempoconf.activity_io import GatedConfig
from tempoconf.plan import PlannedStage

__all__ = ["CHECK_APPLIED_ACTIVITY", "CheckAppliedInput"]

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
    """The live stages 1..k (tempoconf.health.cohort_stages): whom the stage's version reaches."""
    configs: list[GatedConfig] = field(default_factory=list)
    """A changeset's configs, each judged on its own (empty: the one config above)."""
    bucket_key: str | None = None
    """What the cohort's percentile stages bucket by (a changeset's key; None: the path)."""
