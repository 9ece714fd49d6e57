"""The strategy of a rollout request: a rule that generates percentile stages (linear or
exponential), appended after the request's explicit `stages`."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from tempoconf.rollout.spec_fields import Duration, StrictSpec, one_of
from tempoconf.rollout.stages import MAX_STAGES, StageSpec

__all__ = ["ExponentialStrategy", "LinearStrategy", "StrategySpec"]


class LinearStrategy(StrictSpec):
    """Percentile stages `step`, 2×`step`, ... up to 100, each held for `every`."""

    step: float = Field(gt=0, le=100)
    """The first percentile and the increment between two stages."""
    every: Duration | None = None
    """The cooldown of each generated stage; default: the request's `default_cooldown_time`."""

    @model_validator(mode="after")
    def _not_too_many_stages(self) -> LinearStrategy:
        # Refused before it is expanded: a step of 1e-12 would be 10^14 points to build and count.
        # Below 100/(MAX_STAGES+1) the points, even rounded to two decimals, are more than
        # MAX_STAGES distinct ones, so this refuses nothing the count after expansion would keep.
        if self.step * (MAX_STAGES + 1) < 100:
            raise ValueError(
                f"a linear step of {self.step:g} expands to more than {MAX_STAGES} stages"
            )
        return self


class ExponentialStrategy(StrictSpec):
    """Percentile stages `start`, `start`×`factor`, ... up to 100, each held for `every`."""

    start: float = Field(gt=0, le=100)
    """The first percentile."""
    factor: float = Field(gt=1, le=100)
    """Each next percentile is the last one times this, while below 100; then 100."""
    every: Duration | None = None
    """The cooldown of each generated stage; default: the request's `default_cooldown_time`."""


class StrategySpec(StrictSpec):
    """A shorthand that expands to percentile stages (after any explicit `stages`)."""

    model_config = ConfigDict(json_schema_extra=one_of("linear", "exponential", exactly=True))

    linear: LinearStrategy | None = None
    """Percentiles `step`, 2×`step`, 3×`step`, ... up to 100."""
    exponential: ExponentialStrategy | None = None
    """Percentiles `start`, `start`×`factor`, `start`×`factor`², ... while below 100, then 100."""

    @model_validator(mode="after")
    def _exactly_one(self) -> StrategySpec:
        if (self.linear is None) == (self.exponential is None):
            raise ValueError("a strategy is exactly one of 'linear' or 'exponential'")
        return self

    def percentiles(self) -> list[float]:
        points: list[float] = []
        if self.linear is not None:
            step = self.linear.step
            points = [min(100.0, round(step * n, 2)) for n in range(1, int(100 // step) + 2)]
        elif self.exponential is not None:
            current = self.exponential.start
            while current < 100 and len(points) < MAX_STAGES:
                points.append(round(current, 2))
                current *= self.exponential.factor
            points.append(100.0)
        # rounding and capping may repeat a point; cohorts must strictly grow
        return sorted({point for point in points if point > 0})

    def expand(self) -> list[StageSpec]:
        every = self.linear.every if self.linear is not None else self.exponential.every  # type: ignore[union-attr]
        return [StageSpec(percentile=point, cooldown=every) for point in self.percentiles()]
